"""llama-cpp-python's named chat formats (``chat_format="alpaca"`` and the rest).

Each format is a function ``messages -> FormatterResponse`` (prompt text and
the texts that end the reply), written from the model families' published
prompt layouts; the layouts match llama-cpp-python's output for the same
messages. Most are one of a few styles over a role table:

- ``colon``: ``Role: text<sep>`` per message after the system text;
- ``plain``: ``<role>text<sep>`` (the role string carries its own markup);
- ``lines``: ``<role>\\ntext<sep>\\n`` (chatml-like);
and a few are written out (llama-2, mistral-instruct, saiga, chatglm3).
The reply's opening (the assistant role) ends every prompt.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence


@dataclass
class FormatterResponse:
    """llama_cpp.llama_chat_format.ChatFormatterResponse."""
    prompt: str
    stop: str | list[str] | None = None
    stopping_criteria: object = None
    added_special: bool = False
    stop_token_ids: list[int] = field(default_factory=list)


Formatter = Callable[..., FormatterResponse]


def _text(m: dict) -> str | None:
    c = m.get("content")
    return c if isinstance(c, str) else None


def system_text(messages: Sequence[dict]) -> str:
    """The first system message's text ('' without one)."""
    for m in messages:
        if m.get("role") == "system":
            return _text(m) or ""
    return ""


def turns(messages: Sequence[dict], roles: dict[str, str]) -> list[tuple[str, str | None]]:
    """(role markup, text) for the messages whose role the table names."""
    return [(roles[m["role"]], _text(m)) for m in messages if m.get("role") in roles]


def colon(system: str, ts, seps: Sequence[str], space: bool = False) -> str:
    """system<sep0> then 'Role: text<sep i%2>'; the open turn is 'Role:' (or 'Role: ')."""
    out = system + seps[0]
    for i, (role, text) in enumerate(ts):
        out += f"{role}: {text}{seps[i % len(seps)]}" if text else role + (": " if space else ":")
    return out


def plain(system: str, ts, sep: str) -> str:
    return system + "".join(role + text + sep if text else role for role, text in ts)


def lines(system: str, ts, sep: str) -> str:
    out = system + sep + "\n" if system else ""
    return out + "".join(f"{role}\n{text}{sep}\n" if text else f"{role}\n" for role, text in ts)


def _open(messages, roles, reply="assistant"):
    return turns(messages, roles) + [(roles[reply], None)]


# ---------------------------------------------------------------- the formats

def format_llama2(messages, **kw) -> FormatterResponse:
    sys = system_text(messages)
    ts = turns(messages, {"user": "<s>[INST]", "assistant": "[/INST]"})
    out = (f"[INST] <<SYS>>\n{sys}\n<</SYS>>" if sys else "") + " "
    for i, (role, text) in enumerate(ts):
        sep = " " if i % 2 == 0 else "</s>"
        if sys and i == 0:
            out += (text or "") + sep
        else:
            out += f"{role}{text} {sep}" if text else role + " "
    return FormatterResponse(out + "[/INST]")


def format_llama3(messages, **kw):
    roles = {r: f"<|start_header_id|>{r}<|end_header_id|>\n\n"
             for r in ("system", "user", "assistant")}
    return FormatterResponse(plain("", _open(messages, roles), "<|eot_id|>"), "<|eot_id|>")


def format_alpaca(messages, **kw):
    roles = {"user": "### Instruction", "assistant": "### Response"}
    return FormatterResponse(colon(system_text(messages), turns(messages, roles),
                                   ("\n\n", "</s>")))


def format_qwen(messages, **kw):
    sys = "<|im_start|>system\n" + (system_text(messages) or "You are a helpful assistant.")
    roles = {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}
    return FormatterResponse(lines(sys, _open(messages, roles), "<|im_end|>"), "<|endoftext|>")


def format_vicuna(messages, **kw):
    sys = ("A chat between a curious user and an artificial intelligence assistant. The "
           "assistant gives helpful, detailed, and polite answers to the user's questions.")
    return FormatterResponse(colon(sys, _open(messages, {"user": "USER", "assistant":
                                                         "ASSISTANT"}), (" ", "</s>")))


def format_oasst_llama(messages, **kw):
    sys = f"[INST] <<SYS>>\n{system_text(messages)}\n<</SYS>>\n\n"
    roles = {"user": "<|prompter|>", "assistant": "<|assistant|>"}
    return FormatterResponse(plain(sys, _open(messages, roles), "</s>"))


def _baichuan(user: str, assistant: str) -> Formatter:
    def fmt(messages, **kw):
        roles = {"user": user, "assistant": assistant}
        return FormatterResponse(plain(system_text(messages), _open(messages, roles), ""))
    return fmt


format_baichuan2 = _baichuan("<reserved_106>", "<reserved_107>")
format_baichuan = _baichuan("<reserved_102>", "<reserved_103>")

OPENBUDDY_SYSTEM = (
    "You are a helpful, respectful and honest INTP-T AI Assistant named Buddy. You are "
    "talking to a human User.\nAlways answer as helpfully and logically as possible, while "
    "being safe. Your answers should not include any harmful, political, religious, "
    "unethical, racist, sexist, toxic, dangerous, or illegal content. Please ensure that "
    "your responses are socially unbiased and positive in nature.\nIf a question does not "
    "make any sense, or is not factually coherent, explain why instead of answering "
    "something not correct. If you don't know the answer to a question, please don't share "
    "false information.\nYou can speak fluently in many languages, for example: English, "
    "Chinese.\nYou cannot access the internet, but you have vast knowledge, cutoff: "
    "2021-09.\nYou are trained by OpenBuddy team, (https://openbuddy.ai, "
    "https://github.com/OpenBuddy/OpenBuddy), you are based on LLaMA and Falcon transformers "
    "model, not related to GPT or OpenAI.\n")


def format_openbuddy(messages, **kw):
    roles = {"user": "User", "assistant": "Assistant"}
    return FormatterResponse(colon(OPENBUDDY_SYSTEM, _open(messages, roles), ("\n",)))


def format_redpajama_incite(messages, **kw):
    roles = {"user": "<human>", "assistant": "<bot>"}
    return FormatterResponse(colon(system_text(messages), _open(messages, roles), ("\n",)),
                             "<human>")


def format_snoozy(messages, **kw):
    sys = system_text(messages) or (
        "The prompt below is a question to answer, a task to complete, or a conversation to "
        "respond to; decide which and write an appropriate response.")
    roles = {"user": "### Prompt", "assistant": "### Response"}
    return FormatterResponse(colon(sys, _open(messages, roles), ("\n",)), "###")


def format_phind(messages, **kw):
    sys = "### System Prompt\nYou are an intelligent programming assistant."
    roles = {"user": "### User Message", "assistant": "### Assistant"}
    return FormatterResponse(colon(sys, _open(messages, roles), ("\n\n",)))


def format_intel(messages, **kw):
    roles = {"user": "### User:", "assistant": "### Assistant:"}
    return FormatterResponse(colon("### System:\n{system_message}", _open(messages, roles),
                                   ("\n",)))


OPEN_ORCA_SYSTEM = (
    "You are a helpful assistant. Please answer truthfully and write out your thinking step "
    "by step to be sure you get the right answer. If you make a mistake or encounter an "
    "error in your thinking, say so out loud and attempt to correct it. If you don't know or "
    "aren't sure about something, say so clearly. You will act as a professional logician, "
    "mathematician, and physicist. You will also act as the most appropriate type of expert "
    "to answer any particular question or solve the relevant problem; state which expert "
    "type your are, if so. Also think of any particular named expert that would be ideal to "
    "answer the relevant question or solve the relevant problem; name and act as them, if "
    "appropriate.")


def format_open_orca(messages, **kw):
    # roles as the messages spell them: only 'User' / 'Assistant' messages count
    ts = turns(messages, {"User": "User", "Assistant": "Assistant"}) + [("Assistant", None)]
    return FormatterResponse(colon(OPEN_ORCA_SYSTEM, ts, ("<|end_of_turn|>\n",), space=True),
                             "User")


def format_mistrallite(messages, **kw):
    sys = f"<|system|>{system_text(messages)}</s>"
    roles = {"user": "<|prompter|>", "assistant": "</s>\n<|assistant|>"}
    return FormatterResponse(plain(sys, _open(messages, roles), " "))


def format_zephyr(messages, **kw):
    sys = f"<|system|>\n{system_text(messages)}"
    roles = {"user": "<|user|>\n", "assistant": "<|assistant|>\n"}
    return FormatterResponse(lines(sys, _open(messages, roles), "</s>"), "</s>")


def format_pygmalion(messages, **kw):
    sys = f"<|system|>{system_text(messages)}"
    roles = {"user": "<|user|>", "assistant": "<|model|>"}
    return FormatterResponse(lines(sys, _open(messages, roles), "\n"), "\n")


def format_chatml(messages, **kw):
    sys = f"<|im_start|>system\n{system_text(messages)}"
    roles = {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}
    return FormatterResponse(lines(sys, _open(messages, roles), "<|im_end|>"), "<|im_end|>")


def format_mistral_instruct(messages, **kw):
    out = ""
    for m in messages:
        text = m.get("content")
        if m.get("role") == "user" and isinstance(text, str):
            out += "[INST] " + text
        elif m.get("role") == "assistant" and text is not None:
            out += " [/INST]" + text + "</s>"
    return FormatterResponse(out + " [/INST]", "</s>")


def format_chatglm3(messages, **kw):
    out = f"<|system|>\n{system_text(messages)}"
    for role, text in _open(messages, {"user": "<|user|>", "assistant": "<|assistant|>"}):
        out += f"{role}\n {text}" if text else role
    return FormatterResponse(out, "</s>")


def format_openchat(messages, **kw):
    sys = f"{system_text(messages)}<|end_of_turn|>"
    roles = {"user": "GPT4 Correct User: ",
             "assistant": "<|end_of_turn|>GPT4 Correct Assistant: "}
    return FormatterResponse(lines(sys, _open(messages, roles), "<|end_of_turn|>"),
                             "<|end_of_turn|>")


def format_saiga(messages, **kw):
    out = ""
    for role, text in turns(messages, {"user": "user", "bot": "bot", "system": "system"}):
        out += f"<s>{role}\n{text}</s>" if text else f"<s>{role}\n"
    return FormatterResponse((out + "<s>bot").strip())


def format_gemma(messages, **kw):
    roles = {"user": "<start_of_turn>user\n", "assistant": "<start_of_turn>model\n"}
    return FormatterResponse(plain("", _open(messages, roles), "<end_of_turn>\n"),
                             "<end_of_turn>\n")


# name -> formatter, in llama-cpp-python's names
NAMED_FORMATS: dict[str, Formatter] = {
    "llama-2": format_llama2, "llama-3": format_llama3, "alpaca": format_alpaca,
    "qwen": format_qwen, "vicuna": format_vicuna, "oasst_llama": format_oasst_llama,
    "baichuan-2": format_baichuan2, "baichuan": format_baichuan,
    "openbuddy": format_openbuddy, "redpajama-incite": format_redpajama_incite,
    "snoozy": format_snoozy, "phind": format_phind, "intel": format_intel,
    "open-orca": format_open_orca, "mistrallite": format_mistrallite, "zephyr": format_zephyr,
    "pygmalion": format_pygmalion, "chatml": format_chatml,
    "mistral-instruct": format_mistral_instruct, "chatglm3": format_chatglm3,
    "openchat": format_openchat, "saiga": format_saiga, "gemma": format_gemma,
}
