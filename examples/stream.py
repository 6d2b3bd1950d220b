"""Stream a completion token by token."""
import sys

from pyllamakv import Llama

with Llama(n_ctx=512, seed=42) as llm:
    for chunk in llm("Write a haiku about the sea:\n", max_tokens=48, stream=True):
        sys.stdout.write(chunk["choices"][0]["text"])
        sys.stdout.flush()
    print(f"\n[{llm.timings.decode_tps:.1f} tokens/s]")
