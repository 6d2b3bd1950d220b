"""Complete a prompt with the default model (SmolLM2-135M-Instruct)."""
from pyllamakv import Llama

with Llama(n_ctx=512) as llm:
    out = llm("The three primary colours are", max_tokens=32, temperature=0)
    print(out["choices"][0]["text"])
    print(out["usage"])
