"""The slot pool: several requests generated at once, and the bounded queue before them.

A *slot* is a SlotEngine (slot_engine.py): one sequence of the server's shared
engine (engines.py) and the model's shared parts, driven by its own thread; the engine's scheduler merges the
slots' decodes into batched steps (the weights read once per step), and a
slot's output never depends on its neighbours (a sequence's logits are those
it gets alone; each has its own sampler). A *job* is
one choice of a request (fanout.py): a function run on a slot's engine that
yields items (a response dict, or stream chunks); the items reach the event
loop through the job's asyncio queue. Free slots take waiting jobs first come, first served; a queue
that is full refuses new ones (QueueFull, which the app answers with 503).
Hybrid models on CUDA and models with an MTP block keep a context per slot (the
core holds one such sequence a context there); on the CPU hybrids share too.

Stopping early: a job is cancelled (its client went away) or runs past its
deadline. Its slot's sequence is cancelled (Sequence.cancel; accounting.py
checks the deadline between two tokens), and the generation ends
before its next token as a finished one, so the slot is free at once and a
timed-out request still gets its final chunk.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator

from ..errors import ForeignLibraryError, InternalError


class QueueFull(Exception):
    """Every slot is busy and the queue holds queue_size requests already."""


class JobStopped(Exception):
    """The job was stopped (cancelled, timed out, or the server is closing)."""


# ---------------------------------------------------------------- job

class Job:
    """One request: fn(engine, job) yields its items; they come back through get()."""

    def __init__(self, fn: Callable[[Any, "Job"], Iterator[Any]],
                 loop: asyncio.AbstractEventLoop, timeout_s: float):
        self.fn = fn
        self.deadline = time.monotonic() + timeout_s
        self.timed_out = False          # the deadline passed (set by should_stop)
        self.stopped_early = False      # the slot ended the completion before the model did
        self.prompt_tokens = 0          # counted by accounting.counted
        self.generated_tokens = 0
        self.completion_tokens = 0      # generated_tokens but an end token (OpenAI's usage)
        self.cached_tokens = 0          # prompt tokens reused from the slot's last request
        self.t_start = time.perf_counter()   # timings (the log line, /metrics): submitted,
        self.t_first: float | None = None    # the first token sampled,
        self.t_last: float | None = None     # the last one
        self.t_run: float | None = None      # and when a slot took it
        self.drafted_tokens = 0         # speculative decoding (speculation.py): drafts verified,
        self.accepted_tokens = 0        # those kept,
        self.verify_passes = 0          # and the target passes that verified them
        self.finished = False           # its "end" or "error" was put
        self._loop = loop
        self._items: asyncio.Queue = asyncio.Queue()
        self._cancelled = threading.Event()
        self.on_cancel: Callable[[], None] | None = None   # the slot's Sequence.cancel

    def cancel(self) -> None:
        self._cancelled.set()
        hook = self.on_cancel
        if hook is not None:
            hook()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def should_stop(self) -> bool:
        if self._cancelled.is_set():
            return True
        if time.monotonic() >= self.deadline:
            self.timed_out = True
            return True
        return False

    def put(self, kind: str, value: Any = None) -> None:
        """From the slot's thread: ("item", x), ("error", exception) or ("end", None)."""
        if kind != "item":
            self.finished = True
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, (kind, value))
        except RuntimeError:   # the event loop is closed: nobody is listening
            pass

    async def get(self) -> tuple[str, Any]:
        return await self._items.get()


# ---------------------------------------------------------------- pool

class Slot:
    def __init__(self, index: int, engine: Any):
        self.index, self.engine = index, engine
        self.job: Job | None = None
        self.kv_stats: dict = {}        # a snapshot after each job (read by /metrics)
        self.mtp_stats: dict = {}       # the same of its MTP block, where it has one
        self.n_jobs = 0
        self.snapshot()

    @property
    def busy(self) -> bool:
        return self.job is not None

    def snapshot(self) -> None:
        """The engine's KV and MTP figures now (the slot's own thread, between jobs)."""
        stats = getattr(self.engine, "kv_stats", None)
        mtp = getattr(self.engine, "mtp_stats", None)
        try:
            if stats is not None:
                self.kv_stats = stats()
            if mtp is not None:
                self.mtp_stats = mtp()
        except Exception:    # a closed or dead context: keep the last snapshot
            pass


class SlotPool:
    """Slots, each with its thread, and the queue of jobs waiting for one."""

    def __init__(self, engines: list, queue_size: int,
                 on_done: Callable[[Job], None] | None = None):
        self.slots = [Slot(i, e) for i, e in enumerate(engines)]
        self.queue_size = queue_size
        self.on_done = on_done
        self._waiting: deque[Job] = deque()
        self._cv = threading.Condition()
        self._idle = 0
        self._closed = False
        self.restarts = 0               # slot workers that died and were replaced
        self._threads = [self._start(s) for s in self.slots]

    def _start(self, slot: Slot) -> threading.Thread:
        t = threading.Thread(target=self._work, args=(slot,), daemon=True,
                             name=f"pyllamakv-slot-{slot.index}")
        t.start()
        return t

    def check_workers(self) -> int:
        """Replaces any slot worker that is gone (the pool is not closing);
        returns how many were replaced now. _work replaces itself as it dies;
        this catches a thread killed in a way no handler saw."""
        n = 0
        with self._cv:
            for i, t in enumerate(self._threads):
                if not t.is_alive() and not self._closed:
                    self.slots[i].job = None
                    self._threads[i] = self._start(self.slots[i])
                    self.restarts += 1
                    n += 1
        return n

    @property
    def queue_length(self) -> int:
        """Jobs accepted and not yet on a slot."""
        return len(self._waiting)

    @property
    def busy(self) -> int:
        return sum(s.busy for s in self.slots)

    def submit(self, job: Job) -> None:
        """Queue job, or raise QueueFull (RuntimeError once closed)."""
        self.submit_all([job])

    def submit_all(self, jobs: list[Job]) -> None:
        """Queue every job of one request, or none of them (QueueFull, RuntimeError)."""
        with self._cv:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            if len(self._waiting) + len(jobs) > self._idle + self.queue_size:
                raise QueueFull(f"all {len(self.slots)} slots are busy and "
                                f"{self.queue_size} requests are waiting")
            self._waiting.extend(jobs)
            self._cv.notify(len(jobs))

    def withdraw(self, job: Job) -> bool:
        """Take job out of the queue if it has not reached a slot yet (its place frees)."""
        with self._cv:
            try:
                self._waiting.remove(job)
                return True
            except ValueError:
                return False

    def _work(self, slot: Slot) -> None:
        """The slot's thread. Should it die (an exception no request handler
        may keep, such as SystemExit from a library), its job fails, the death
        is logged and counted, and a new thread takes the slot: the slot is
        never left looking idle with nobody serving it."""
        try:
            self._serve(slot)
        except BaseException as e:
            with self._cv:
                replace = not self._closed
                if replace:
                    self.restarts += 1
                    self._threads[slot.index] = self._start(slot)
            logging.getLogger("pyllamakv.server").error(
                "slot %d's worker died (%s: %s)%s", slot.index, type(e).__name__, e,
                "; replaced" if replace else "")

    def _serve(self, slot: Slot) -> None:
        while True:
            with self._cv:
                self._idle += 1
                while not self._waiting and not self._closed:
                    self._cv.wait()
                self._idle -= 1
                if self._closed:
                    return
                job = slot.job = self._waiting.popleft()
            try:
                self._run(slot, job)
            finally:
                if not job.finished:
                    job.put("error", InternalError("the slot's worker died during the request"))
                slot.job = None
                slot.n_jobs += 1
                if self.on_done is not None:
                    self.on_done(job)

    def _run(self, slot: Slot, job: Job) -> None:
        if job.should_stop():
            job.put("error", JobStopped("timed out waiting for a slot" if job.timed_out
                                        else "cancelled while waiting for a slot"))
            return
        slot.engine.job = job
        seq = getattr(slot.engine, "sequence", None)
        if seq is not None:
            seq.uncancel()
            job.on_cancel = seq.cancel
            if job.cancelled:        # cancelled between the check above and the hook
                seq.cancel()
        job.t_run = time.perf_counter()
        items = None
        try:
            items = job.fn(slot.engine, job)
            for item in items:
                job.put("item", item)
                if job.cancelled:
                    break
        except Exception as e:     # bad input and engine failures alike go to the request
            job.put("error", e)
        except BaseException as e:  # a native library's panic (pyo3), SystemExit, ...
            job.put("error", ForeignLibraryError(f"{type(e).__name__}: {e}"))
            if isinstance(e, (SystemExit, KeyboardInterrupt)):
                raise              # the worker ends; _work replaces it
        else:
            job.put("end")
        finally:
            if items is not None and hasattr(items, "close"):
                items.close()      # in this thread: the engine is this slot's alone
            slot.engine.job = None
            job.on_cancel = None
            slot.snapshot()

    def close(self) -> None:
        """Refuse new jobs, fail the waiting ones, stop running ones, join the threads."""
        with self._cv:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
            for s in self.slots:
                if s.job is not None:
                    s.job.cancel()
            self._cv.notify_all()
        for job in waiting:
            job.put("error", JobStopped("the server is shutting down"))
        for t in self._threads:
            t.join()
        for s in self.slots:
            close = getattr(s.engine, "close", None)
            if close is not None:
                close()
