"""A pytest plugin (-p) for llama.cpp's server tests run against `pyllamakv serve`
(tests/test_llama_server_suite.py): no model downloads (the shim serves the
default model), and `wget` (imported by their utils.py, used only to download)
stubbed where it is not installed. It acts when imported, before their
conftest.py imports utils.py (their folder is on PYTHONPATH)."""
import sys
import types

try:
    import wget  # noqa: F401
except ImportError:
    def _no_download(*a, **k):
        raise RuntimeError("no downloads under pyllamakv's shim")
    sys.modules["wget"] = types.SimpleNamespace(download=_no_download)

import utils  # noqa: E402  (theirs)

utils.ServerPreset.load_all = staticmethod(lambda: None)


def pytest_collection_modifyitems(config, items):
    """Deselect the tests named in LLAMA_SUITE_SKIP (a JSON list of "file.py::test"),
    every parametrization of each."""
    import json
    import os
    skip = set(json.loads(os.environ.get("LLAMA_SUITE_SKIP", "[]")))
    keep, dropped = [], []
    for item in items:
        name = f"{item.path.name}::{getattr(item, 'originalname', item.name)}"
        (dropped if name in skip else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
