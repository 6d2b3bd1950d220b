"""Request fields this server knows of but does not honour: refused by name.

OpenAI's API and llama.cpp's server take fields that change what comes back
(``response_format``, ``grammar``, ``tools``, ...). Ignoring one would answer
200 with something the client did not ask for (prose where JSON was required),
so a request that sets one is a 400 naming it, until a request model declares
the field (then it is honoured and no longer refused here). Fields that change
nothing about the answer (``user``, ``metadata``, ``store``) are not listed.
"""
from __future__ import annotations

from typing import Any

# field -> what it asks for (llama.cpp's server's names beside OpenAI's)
FIELDS = {
    "response_format": "structured output (a JSON object or schema)",
    "grammar": "a GBNF grammar",
    "json_schema": "output following a JSON schema",
    "tools": "function calling",
    "tool_choice": "function calling",
    "functions": "function calling",
    "function_call": "function calling",
    "parallel_tool_calls": "function calling",
    "logprobs": "log probabilities",
    "top_logprobs": "log probabilities",
    "n_probs": "token probabilities",
    "best_of": "best-of sampling",
    "suffix": "insertion (a suffix after the completion)",
    "mirostat": "mirostat sampling",
    "mirostat_tau": "mirostat sampling",
    "mirostat_eta": "mirostat sampling",
    "tfs_z": "tail-free sampling",
    "dynatemp_range": "dynamic temperature",
    "penalty_last_n": "a repeat-penalty window",
    "repeat_last_n": "a repeat-penalty window",
    "dry_multiplier": "DRY sampling",
    "xtc_probability": "XTC sampling",
    "prediction": "predicted outputs",
    "modalities": "other output modalities",
    "audio": "audio output",
    "reasoning_effort": "reasoning control",
}
# values that ask for nothing (the field's default, as clients send it)
_NEUTRAL = (None, False, [], {}, "", "none", "auto", "text")


def _declared(model) -> set[str]:
    names = set()
    for name, f in model.model_fields.items():
        names.add(name)
        if f.alias:
            names.add(f.alias)
    return names


def unhonoured(body: dict, model) -> tuple[str, str] | None:
    """(field, what it asks for) of the first field in body that asks for
    something model does not declare; None if there is none."""
    declared = _declared(model)
    for field, what in FIELDS.items():
        if field in body and field not in declared:
            value: Any = body[field]
            if field == "response_format" and isinstance(value, dict) \
                    and value.get("type") == "text":
                continue
            if value in _NEUTRAL:
                continue
            return field, what
    return None
