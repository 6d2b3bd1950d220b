"""Hostile input to the tokenizer (issue 38): a gigantic word under a memory
limit, a vocab with a 1 MB token against the prompt-length guard, and vocabs
that make the tokenizers library panic (its PanicException is a BaseException)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest

from pyllamakv.errors import ContextFullError, ForeignLibraryError, LlamaKVError
from pyllamakv.gguf.vocab import byte_decoder
from pyllamakv.text.tokenizer import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpt2(tokens: list[str], merges: list[str]) -> Tokenizer:
    return Tokenizer.from_metadata({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens,
                                    "tokenizer.ggml.merges": merges,
                                    "tokenizer.ggml.pre": "default"})


def test_one_huge_word_stays_in_bounded_memory():
    """Old code handed the whole word to the library: ~110 bytes a character,
    so 6 M characters need ~650 MB over the process's size and abort it."""
    n = 4 * random.randrange(1_500_000, 1_600_000)
    code = textwrap.dedent(f"""
        import resource, sys
        from pyllamakv.text.tokenizer import Tokenizer
        from pyllamakv.gguf.vocab import byte_decoder
        toks = list(byte_decoder()) + ["xx", "xxxx"]
        t = Tokenizer.from_metadata({{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": toks,
            "tokenizer.ggml.merges": ["x x", "xx xx"], "tokenizer.ggml.pre": "default"}})
        t.encode("warm up")
        size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + (300 << 20),) * 2)
        ids = t.encode(b"x" * {n})
        print(len(ids))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT, RAYON_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) == n // 4


def test_a_megabyte_token_does_not_lift_the_prompt_guard():
    big = "y" * (1 << 20)
    t = _gpt2(list(byte_decoder()) + [big], ["y y"])
    assert t.max_token_bytes == 1 << 20
    with pytest.raises(ContextFullError, match="context window"):
        t.check_length(b"z" * 5_000_000, 512)
    with pytest.raises(ContextFullError):
        t.encode("z" * 300_000, max_tokens=512)


@pytest.mark.parametrize("tokens,merges", [(["a"], ["a a"]), (["a", "b"], ["a b"])])
def test_library_panics_become_project_errors(tokens, merges):
    t = _gpt2(tokens, merges)
    with pytest.raises(ForeignLibraryError, match="tokenizers"):
        t.encode("ab aa " + "".join(random.choices("ab ", k=20)))
    # an Exception, so the server's and the user's `except Exception` see it
    assert issubclass(ForeignLibraryError, Exception) and issubclass(ForeignLibraryError, LlamaKVError)


def test_long_word_cut_keeps_short_words_exact():
    toks = list(byte_decoder()) + ["ab", "abab"]
    t = _gpt2(toks, ["a b", "ab ab"])
    text = " ".join("ab" * random.randrange(1, 50) for _ in range(200))
    ids = t.encode(text)
    assert t.decode(ids).decode() == text
