"""Device memory: KV sizes, the residency plan, the budget and the micro-batch."""
