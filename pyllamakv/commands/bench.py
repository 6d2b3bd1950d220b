"""``pyllamakv bench``: prefill and decode tokens per second.

Prefill evaluates n_prompt tokens from an empty cache in n_batch slices;
decode then evaluates n_gen single tokens after it, greedy. Both are repeated
and reported as mean and standard deviation, as llama-bench's pp/tg rows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class BenchRow:
    test: str              # "pp512" / "tg128"
    tokens_per_s: list[float]

    @property
    def mean(self) -> float:
        return float(np.mean(self.tokens_per_s))

    @property
    def std(self) -> float:
        return float(np.std(self.tokens_per_s))


def run(llm, n_prompt: int, n_gen: int, repetitions: int) -> list[BenchRow]:
    if n_prompt < 1 or n_gen < 0 or repetitions < 1:
        raise ValueError("bench needs n_prompt >= 1, n_gen >= 0, repetitions >= 1")
    if n_prompt + n_gen > llm.n_ctx():
        raise ValueError(f"-p {n_prompt} + -n {n_gen} exceed the context ({llm.n_ctx()}); "
                         "raise --ctx")
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, llm.n_vocab(), n_prompt).tolist()
    pp, tg = BenchRow(f"pp{n_prompt}", []), BenchRow(f"tg{n_gen}", [])
    for _ in range(repetitions):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        pp.tokens_per_s.append(n_prompt / (time.perf_counter() - t0))
        if n_gen:
            t0 = time.perf_counter()
            for _ in range(n_gen):
                llm.eval([int(np.argmax(llm.scores[-1]))])
            tg.tokens_per_s.append(n_gen / (time.perf_counter() - t0))
    return [pp, tg] if n_gen else [pp]


def table(rows: list[BenchRow], model: str, device: str, type_k: str, type_v: str) -> str:
    head = f"| {'model':<32} | {'device':<6} | {'kv':<9} | {'test':<7} | {'t/s':>18} |"
    lines = [head, "|" + "|".join("-" * (len(c) + 0) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        lines.append(f"| {model[-32:]:<32} | {device:<6} | {type_k + '/' + type_v:<9} | "
                     f"{r.test:<7} | {r.mean:>10.2f} ± {r.std:>5.2f} |")
    return "\n".join(lines)
