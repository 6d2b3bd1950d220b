"""One place checks each load parameter (config.py): a bad value raises the
same message from every entry point that takes it: Llama, _native.Context,
ServerSettings, `pyllamakv info` / `generate` / `serve` (there as a usage
error naming the flag)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from pyllamakv import Llama, errors
from pyllamakv.commands.cli import main
from pyllamakv.config import LlamaConfig
from pyllamakv.server import ServerSettings

BAD = [
    (dict(kv_pool_mib=-1.0), "kv_pool_mib must be a number in [0.0"),
    (dict(kv_pool_mib="lots"), "kv_pool_mib must be None, a number of MiB or 'auto'"),
    (dict(kv_pool_mib=True), "kv_pool_mib must be None, a number of MiB or 'auto'"),
    (dict(kv_pool_mib=float("nan")), "kv_pool_mib must be a number in [0.0"),
    (dict(gpu_memory_mib=0.0), "gpu_memory_mib must be a number in (0.0"),
    (dict(gpu_memory_mib="1G"), "gpu_memory_mib must be a number"),
    (dict(type_k="q9_9"), "unknown element type"),
    (dict(n_threads=-2), "n_threads must be an int"),
    (dict(device="tpu"), "device must be one of"),
    (dict(n_ctx=-5), "n_ctx must be an int"),
]


def _message(fn) -> str:
    with pytest.raises((ValueError, TypeError)) as e:
        fn()
    return str(e.value)


@pytest.mark.parametrize("kw,match", BAD)
def test_llama_and_server_settings_give_the_config_message(kw, match):
    ref = _message(lambda: LlamaConfig(**kw))
    assert match in ref
    assert _message(lambda: Llama("/nonexistent.gguf", **kw)) == ref   # before the file
    assert _message(lambda: ServerSettings(**kw)) == ref


def test_context_gives_the_config_message():
    from pyllamakv.core.native import Context
    ref = _message(lambda: LlamaConfig(gpu_kernels="turbo"))
    assert "gpu_kernels must be 'exact'" in ref
    assert _message(lambda: Context(None, gpu_kernels="turbo")) == ref


@pytest.mark.parametrize("cmd", [["generate", "hi"], ["serve"], ["info", "--ctx", "64"]])
@pytest.mark.parametrize("flag,value,match", [
    ("--kv-pool-mib", "-3", "kv_pool_mib must be a number in [0.0"),
    ("--kv-pool-mib", "much", "neither a number of MiB nor 'auto'"),
    ("--gpu-memory-mib", "0", "gpu_memory_mib must be a number in (0.0"),
    ("--gpu-memory-mib", "-1", "gpu_memory_mib must be a number in (0.0"),
])
def test_cli_flags_give_the_config_message(cmd, flag, value, match):
    r = CliRunner().invoke(main, [*cmd, flag, value])
    assert r.exit_code == 2, r.output          # a usage error, before any model loads
    assert flag in r.output and match in r.output, r.output


def test_server_keeps_its_own_rules():
    with pytest.raises(ValueError, match="parallel > 1"):
        ServerSettings(kv_pool_mib="auto", parallel=2)
    assert ServerSettings(kv_pool_mib="auto").kv_pool_mib == "auto"
    assert ServerSettings(parallel=4, kv_pool_mib=64).slot_pool_mib == 16
    with pytest.raises(errors.ParameterError, match="kv_pool_mib"):
        ServerSettings(parallel=4, kv_pool_mib=-64)
