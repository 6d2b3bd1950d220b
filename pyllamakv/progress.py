"""Progress of loading and prefill: the ``progress_callback`` protocol and the CLI's bar.

``Llama(progress_callback=f)`` calls ``f(stage, done, total)``: stage
``"load"`` with done/total counting its steps (file, tokenizer, weights,
context), and ``"prefill"`` with done/total counting prompt tokens, once per
batch of n_batch tokens (and once at 0). A callback that raises stops the
load or the prefill with its exception (the cache keeps the tokens that were
evaluated; see Llama.eval).

``TqdmProgress`` is the command line's callback: a tqdm bar on stderr that
appears only when a stage runs longer than a second, with tokens per second
for prefill.
"""
from __future__ import annotations

import sys
from typing import Callable

ProgressCallback = Callable[[str, int, int], object]


class TqdmProgress:
    """A progress_callback drawing one tqdm bar per stage (after 1 s)."""

    def __init__(self, file=None, delay: float = 1.0) -> None:
        self.file = file or sys.stderr
        self.delay = delay
        self._bar = None
        self._stage = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        from tqdm import tqdm
        if stage != self._stage or self._bar is None or done < self._bar.n:
            self.close()
            self._stage = stage
            unit = "tok" if stage == "prefill" else "step"
            self._bar = tqdm(total=total, desc=stage, unit=unit, delay=self.delay,
                             file=self.file, leave=False, dynamic_ncols=True)
        self._bar.update(done - self._bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def report_load(llm, seconds: float) -> None:
    """Llama(verbose=True): what was loaded, where, and the choices made, on stderr."""
    pool = llm.kv_pool_bytes
    kv = "all resident" if pool is None else f"{pool / (1 << 20):.1f} MiB"
    print(f"pyllamakv: loaded {llm.model_path} on {llm.device} in {seconds:.1f} s "
          f"(n_ctx={llm.n_ctx()}, kv pool={kv}, n_ubatch={llm.engine.ctx.n_ubatch}"
          f"{'' if llm.config.n_ubatch else ' (chosen)'})", file=sys.stderr)
    if llm.memory is not None:
        print(f"pyllamakv: {llm.memory.describe()}", file=sys.stderr)
