"""Test the installed package, not the source tree.

``python -m pytest`` puts the current directory first on sys.path; from the
repository root that would import ./pyllamakv, which has no compiled core.
Unless PYLLAMAKV_LIBRARY points at a built library (development), the root
is taken off sys.path so the installed package is imported.

The fixture ``path`` (the default model's path, skipping when it is missing) serves
every module that asks for it.
"""
import os
import sys

import pytest

from _smollm2 import require_model_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if not os.environ.get("PYLLAMAKV_LIBRARY") and "pyllamakv" not in sys.modules:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]


@pytest.fixture(scope="module")
def path() -> str:
    """The default model's path (tests/_smollm2.py), once per module; skips when missing."""
    return require_model_path()

