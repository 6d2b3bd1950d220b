"""A job's figures, counted from the token stream of its slot's sequence.

Every completion and chat a slot runs reads its sampled ids through
``counted``: the prompt tokens the sequence already held (``cached_tokens``,
OpenAI's usage.prompt_tokens_details), the prompt, generated and completion
tokens (an end token is generated but no part of the completion), the time of
the first and the last token, and the speculative counters of the
generation's Timings once it ends. It is also where a job stops early: when
the job is cancelled (its client went away) or runs past its deadline, the
sequence is cancelled (Sequence.cancel) and the stream ends before its next
token, as a finished one, so the slot is free at once.
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator

from ..engine.sequence import Sequence, common_prefix
from ..engine.state import Timings


def counted(tokens: Iterator[int], job, seq: Sequence, prompt: list[int],
            ends: Iterable[int], timings: Timings) -> Iterator[int]:
    """tokens (a token stream of prompt on seq, not started yet), counted into job
    (slots.Job; None: counted nowhere) and stopped through seq when job says so."""
    if job is None:
        yield from tokens
        return
    # the prefix the stream keeps (all but the prompt's last token at most)
    job.cached_tokens = min(common_prefix(seq.input_ids().tolist(), prompt),
                            max(len(prompt) - 1, 0))
    job.prompt_tokens += len(prompt)
    ends = set(ends)
    try:
        for token in tokens:
            if job.should_stop():
                job.stopped_early = True
                seq.cancel()          # the generation ends before its next token
                return
            now = time.perf_counter()
            if job.t_first is None:
                job.t_first = now
            job.t_last = now
            job.generated_tokens += 1
            job.completion_tokens += token not in ends
            yield token
    finally:
        tokens.close()
        job.drafted_tokens += timings.drafted_tokens
        job.accepted_tokens += timings.accepted_tokens
        job.verify_passes += timings.verify_passes
