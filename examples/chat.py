"""A two-turn chat; the second turn reuses the first turn's KV cache."""
from pyllamakv import Llama

with Llama(n_ctx=1024) as llm:
    messages = [{"role": "user", "content": "Name a planet with rings."}]
    for question in (None, "How many moons does it have?"):
        if question:
            messages.append({"role": "user", "content": question})
        reply = llm.create_chat_completion(messages, max_tokens=64)
        answer = reply["choices"][0]["message"]["content"]
        print(f"user: {messages[-1]['content']}\nassistant: {answer}\n")
        messages.append({"role": "assistant", "content": answer})
        print(f"[prefill evaluated {llm.timings.prefill_tokens} new tokens]\n")
