"""Chat templates: SmolLM2's template rendered to a hand-written prompt, the
ChatML fallback, stop strings, template errors and message validation."""
from __future__ import annotations

import datetime

import pytest

from pyllamakv.text.chat import ChatFormatter, ChatTemplateError
from pyllamakv.text.tokenizer import Tokenizer

from _smollm2 import metadata

SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_metadata(metadata())


@pytest.fixture(scope="module")
def smol(tok) -> ChatFormatter:
    return ChatFormatter.from_metadata(metadata(), tok)


def test_smollm2_template_default_system(smol):
    out = smol.format([{"role": "user", "content": "Hi there"}])
    assert out.prompt == SYSTEM + "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    assert out.stop == ["<|im_end|>"]
    assert 2 in out.stop_token_ids and out.added_special


def test_smollm2_template_conversation_no_generation_prompt(smol):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"}]
    out = smol.format(msgs, add_generation_prompt=False)
    assert out.prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                          "<|im_start|>user\n2+2?<|im_end|>\n"
                          "<|im_start|>assistant\n4<|im_end|>\n")


def test_prompt_tokenizes_with_control_tokens(smol, tok):
    out = smol.format([{"role": "user", "content": "Hi"}])
    ids = tok.encode(out.prompt, add_bos=not out.added_special, special=True)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2    # 3 starts, 2 ends


def test_fallback_chatml_without_template(tok):
    meta = {k: v for k, v in metadata().items() if k != "tokenizer.chat_template"}
    f = ChatFormatter.from_metadata(meta, tok)
    assert f.is_fallback
    out = f.format([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])
    assert out.prompt == ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
                          "<|im_start|>assistant\n")
    assert "<|im_end|>" in out.stop
    assert ChatFormatter(None).format([{"role": "user", "content": "x"}], False).prompt == \
        "<|im_start|>user\nx<|im_end|>\n"


def test_template_variables(tok):
    tpl = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
           "{% if add_generation_prompt %}>{% endif %}{{ eos_token }}|{{ strftime_now('%Y') }}")
    f = ChatFormatter.from_metadata({"tokenizer.chat_template": tpl}, tok)
    out = f.format([{"role": "user", "content": "a"}])
    year = datetime.datetime.now().year
    assert out.prompt in {f"<|im_start|>[user:a]><|im_end|>|{y}" for y in (year, year + 1)}


def test_raise_exception_from_template():
    tpl = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok"
    f = ChatFormatter(tpl)
    assert f.format([{"role": "user", "content": "x"}]).prompt == "ok"
    with pytest.raises(ChatTemplateError, match="first must be user"):
        f.format([{"role": "system", "content": "x"}])


def test_sandbox_blocks_mutation_and_internals():
    with pytest.raises(ChatTemplateError):
        ChatFormatter("{% set _ = messages.append(1) %}").format([{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError):
        ChatFormatter("{{ messages.__class__.__mro__[1].__subclasses__() }}").format(
            [{"role": "user", "content": "x"}])


def test_broken_template_raises():
    with pytest.raises(ChatTemplateError, match="parse"):
        ChatFormatter("{% for m in messages %}")


@pytest.mark.parametrize("messages, match", [
    ("hello", "list"),
    ([], "empty"),
    (["hi"], r"messages\[0\] must be a dict"),
    ([{"content": "hi"}], "role"),
    ([{"role": "user"}], "content"),
    ([{"role": "user", "content": 3}], r"messages\[0\]\['content'\] must be a str"),
    ([{"role": "user", "content": "a"}, {"role": None, "content": "b"}], r"messages\[1\]\['role'\]"),
    ([{"role": "", "content": "b"}], "empty"),
])
def test_bad_messages_raise(smol, messages, match):
    with pytest.raises(ValueError, match=match):
        smol.format(messages)
