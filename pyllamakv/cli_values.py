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
