"""OpenAI-shaped requests: completion, chat, tools, grammar, embeddings."""
