"""Option values shared by the command line's commands (cli.py, server/command.py)."""
from __future__ import annotations

import click


def _checked(check, value):
    """value through config.py's check of its parameter, as a usage error of the flag."""
    try:
        return check(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def pool_mib(ctx, param, value: str | None):
    """--kv-pool-mib: a number of MiB, 'auto', or unset (None: all resident)."""
    if value is None or value == "auto":
        return value
    try:
        mib = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number of MiB nor 'auto'") from None
    from ..config import check_kv_pool_mib
    return _checked(check_kv_pool_mib, mib)


def memory_mib(ctx, param, value: float | None):
    """--gpu-memory-mib: a number of MiB > 0, or unset (no budget)."""
    from ..config import check_gpu_memory_mib
    return _checked(check_gpu_memory_mib, value)


def memory_option(help: str = "device memory for weights, workspace and KV together, in MiB "
                              "(the KV pool takes what is left)"):
    return click.option("--gpu-memory-mib", "gpu_memory_mib", type=float, default=None,
                        callback=memory_mib, help=help)


def cpu_moe(ctx, param, value: int | None):
    """--n-cpu-moe: a number of layers >= 0, or unset."""
    from ..config import check_n_cpu_moe
    return _checked(check_n_cpu_moe, value)


def cpu_moe_option():
    return click.option("--n-cpu-moe", "-ncmoe", "n_cpu_moe", type=int, default=None,
                        callback=cpu_moe,
                        help="keep the experts of the first N layers in host memory, computed "
                             "on the CPU (llama.cpp's --n-cpu-moe; mixture-of-experts models; "
                             "on the CPU backend every layer's are)")
