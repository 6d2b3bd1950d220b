"""Option values shared by the command line's commands (cli.py, server/command.py)."""
from __future__ import annotations

import click


def pool_mib(ctx, param, value: str | None):
    """--kv-pool-mib: a number of MiB, 'auto', or unset (None: all resident)."""
    if value is None or value == "auto":
        return value
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number of MiB nor 'auto'") from None


def memory_mib(ctx, param, value: float | None):
    """--gpu-memory-mib: a number of MiB > 0, or unset (no budget)."""
    if value is not None and not value > 0:
        raise click.BadParameter(f"must be a number of MiB > 0, got {value:g}")
    return value


def memory_option(help: str = "device memory for weights, workspace and KV together, in MiB "
                              "(the KV pool takes what is left)"):
    return click.option("--gpu-memory-mib", "gpu_memory_mib", type=float, default=None,
                        callback=memory_mib, help=help)
