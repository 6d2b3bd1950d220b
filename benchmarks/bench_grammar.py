"""The cost of a grammar on decode: time per token with and without a JSON-schema mask.

    python benchmarks/bench_grammar.py [MODEL] [-n 64] [-r 3]

Greedy decoding of the same prompt three ways: no grammar, a GBNF grammar that
allows any text of letters and spaces, and a JSON schema; prints tokens per second
and the grammar's share of the time per token (median of -r runs after a warm-up).
"""
import argparse
import statistics
import time

from pyllamakv import Llama
from pyllamakv.api.grammar import LlamaGrammar

SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}}}}


def rate(llm, grammar, n):
    t0 = time.perf_counter()
    out = llm("Write a long list of things as JSON:", max_tokens=n, temperature=0,
              grammar=grammar)
    k = out["usage"]["completion_tokens"]
    return k / (time.perf_counter() - t0 - llm.timings.prefill_s), k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    a = ap.parse_args()
    llm = Llama(a.model, n_ctx=512)
    cases = {"none": None,
             "gbnf letters": LlamaGrammar.from_string('root ::= [a-zA-Z ]+'),
             "json schema": LlamaGrammar.from_json_schema(SCHEMA)}
    base = None
    for name, g in cases.items():
        rate(llm, g, 8)
        runs = [rate(llm, g, a.n) for _ in range(a.r)]
        tps = statistics.median(r[0] for r in runs)
        base = base or tps
        print(f"{name:14s} {tps:7.1f} tok/s  ({runs[0][1]} tokens)  "
              f"cost per token {1000 / tps - 1000 / base:+.2f} ms ({base / tps - 1:+.1%})")


if __name__ == "__main__":
    main()
