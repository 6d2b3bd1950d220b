"""The slot pool: several requests generated at once, and the bounded queue before them.

A *slot* is one sequence's engine. Today that is a Llama of its own (its own
Context over the one loaded Model) driven by its own thread: the core releases
the GIL while it decodes, so slots run in parallel, and a slot's output never
depends on its neighbours (each has its own KV cache and sampler). A *job* is
one choice of a request (fanout.py): a function run on a slot's engine that
yields items (a response dict, or stream chunks); the items reach the event
loop through the job's asyncio queue. Free slots take waiting jobs first come, first served; a queue
that is full refuses new ones (QueueFull, which the app answers with 503).
On a GPU with parallel > 1 the slots' Llamas share one context (seq_batch.py):
each holds a sequence of it, and their threads' decode calls merge into
batched steps (the weights read once per step). On the CPU, and for hybrid
models, each slot keeps a context of its own.

Stopping early: a job is cancelled (its client went away) or runs past its
deadline. Its slot notices between two tokens (SlotLlama.generate) and ends
the completion as if the model had produced an end token, so the slot is free
at once and a timed-out request still gets its final chunk.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator

from ..core.native import GGUFFile, Model, cuda_device_count, model_params
from ..config import LlamaConfig, choose_device
from ..default_model import default_model_path
from ..llama import Llama
from ..engine.seq_batch import SharedContext
from .settings import ServerSettings
from ..spec.drafters import make_drafter
from ..text.chat import ChatFormatter
from ..text.chat_formats import CHAT_FORMATS
from .speculation import DRAFT, LOOKUP, MTP, SpecRequest, check_available


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
        self.prompt_tokens = 0          # counted by SlotLlama.generate
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
        self._loop = loop
        self._items: asyncio.Queue = asyncio.Queue()
        self._cancelled = threading.Event()

    def cancel(self) -> None:
        self._cancelled.set()

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
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, (kind, value))
        except RuntimeError:   # the event loop is closed: nobody is listening
            pass

    async def get(self) -> tuple[str, Any]:
        return await self._items.get()


# ---------------------------------------------------------------- engine

def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SlotLlama(Llama):
    """A Llama whose generation its slot can stop between two tokens."""

    job: Job | None = None
    sampled_logprobs = True     # logprobs of sampled tokens without logits_all (completion.py)

    def use_chat_template(self, template: str, source: str) -> None:
        """Chat through template (jinja source) instead of the model's (--chat-template)."""
        self._chat = ChatFormatter.from_metadata({"tokenizer.chat_template": template},
                                                 self.tokenizer, source=source)

    @property
    def chat_template(self) -> str:
        return self._chat.template

    def apply_template(self, messages: list[dict]) -> str:
        """The prompt messages render to (llama-server's /apply-template)."""
        return self._chat.format(messages, add_generation_prompt=True).prompt

    def _generate(self, tokens, *args, **kw):
        # the token stream every completion and chat reads (completion_pieces)
        job = self.job
        if job is not None:
            job.cached_tokens = min(common_prefix(self.input_ids.tolist(), tokens),
                                    max(len(tokens) - 1, 0))
        inner = super()._generate(tokens, *args, **kw)
        if job is not None:
            job.prompt_tokens += len(tokens)     # a prompt list: each prompt's
        ends = set(self.tokenizer.eog_ids)
        try:
            for token in inner:
                if job is not None and job.should_stop():
                    job.stopped_early = True
                    if not self.tokenizer.eog_ids:
                        raise JobStopped("stopped between two tokens")
                    yield min(self.tokenizer.eog_ids)   # completion_pieces ends here
                    return
                if job is not None:
                    now = time.perf_counter()
                    if job.t_first is None:
                        job.t_first = now
                    job.t_last = now
                    job.generated_tokens += 1
                    job.completion_tokens += token not in ends
                yield token
        finally:
            inner.close()
            if job is not None:
                t = self.timings
                job.drafted_tokens += t.drafted_tokens
                job.accepted_tokens += t.accepted_tokens
                job.verify_passes += t.verify_passes


def slot_budget_mib(budget_mib: float, tensors, parallel: int) -> float:
    """Each slot's gpu_memory_mib: the weights (loaded once, counted by every slot)
    and an equal share of what they leave of the server's budget."""
    from ..memory.budget import MIB, weight_device_bytes
    from ..errors import MemoryBudgetError
    w = weight_device_bytes(tensors) / MIB
    if w > budget_mib:
        raise MemoryBudgetError(f"--gpu-memory-mib: the weights alone take {w:.1f} MiB of "
                                f"device memory, more than the budget of {budget_mib:.1f} MiB")
    return w + (budget_mib - w) / parallel


def load_engines(s: ServerSettings) -> list[SlotLlama]:
    """s.parallel SlotLlamas over one Model: the weights are loaded once."""
    path = s.model or default_model_path()
    kw: dict[str, Any] = dict(n_ctx=s.n_ctx, n_threads=s.threads_per_slot, device=s.device,
                              type_k=s.type_k, type_v=s.type_v, kv_pool_mib=s.slot_pool_mib,
                              n_gpu_layers=s.n_gpu_layers)
    file = GGUFFile(path)
    if s.embedding:
        return [_embedding_engine(s, path, file, kw) for _ in range(s.parallel)]
    if s.gpu_memory_mib is not None:
        kw["gpu_memory_mib"] = slot_budget_mib(s.gpu_memory_mib, file.tensors, s.parallel)
    cfg = LlamaConfig(s.n_ctx, device=s.device, type_k=s.type_k, type_v=s.type_v)
    device = choose_device(cfg, model_params(file)["n_layer"], cuda_device_count())
    model = Model(file, device, s.threads_per_slot)
    # on a GPU one context for all slots, batched steps (weights read once per step); on the
    # CPU a context each (slots in parallel on their own threads ran faster here); hybrids:
    # a context each
    if s.parallel > 1 and device != "cpu" and not model.hparams.get("full_attn_interval"):
        kw["_context"] = SharedContext(s.parallel).context
    # every slot is made with a drafter, so that a budget counts the logits rows a
    # verification needs (budget.py): any request may ask for speculation; a model with an
    # MTP block gets contexts that run it (speculative.type "mtp"), a draft GGUF its own
    has_mtp = model.n_nextn > 0
    gguf = s.draft_model not in (None, "lookup", "mtp")
    engines = [SlotLlama(path, _model=model, draft_model="mtp" if has_mtp else
                         s.draft_model or "lookup", **kw) for _ in range(s.parallel)]
    for e in engines:
        e.spec_mtp = e.draft_model if has_mtp else None
        e.spec_draft_model = None if not gguf else \
            make_drafter(s.draft_model, e) if has_mtp else e.draft_model
        e.spec_default = {None: None, "lookup": LOOKUP, "mtp": MTP}.get(s.draft_model, DRAFT)
        e.draft_model = None      # a request's fields choose (speculation.drafting)
        if has_mtp:               # on only for requests that draft with it (Llama._generate)
            e._ctx.set_mtp(False)
        check_available(SpecRequest(), e)     # --draft mtp on a model without the block
        if s.chat_template is not None:
            e.use_chat_template(*chat_template_source(s.chat_template))
    return engines


def chat_template_source(value: str) -> tuple[str, str]:
    """(jinja source, its name in errors) of --chat-template: a named format or a template."""
    if value in CHAT_FORMATS:
        return CHAT_FORMATS[value][0], f"--chat-template {value}"
    if "{%" not in value and "{{" not in value:
        raise ValueError(f"--chat-template {value!r} is neither a known format "
                         f"({', '.join(sorted(CHAT_FORMATS))}) nor a jinja template")
    return value, "--chat-template"


def _embedding_engine(s: ServerSettings, path: str, file, kw: dict) -> SlotLlama:
    """A slot of an embedding server (--embedding): hidden states, pooled; mean pooling
    where neither --pooling nor the model names one (OpenAI's answer is one vector)."""
    pooling = s.pooling
    if pooling is None:
        arch = file.metadata.get("general.architecture", "")
        pooling = file.metadata.get(f"{arch}.pooling_type", "mean") or "mean"
    return SlotLlama(path, embedding=True, pooling_type=pooling, **kw)


# ---------------------------------------------------------------- pool

class Slot:
    def __init__(self, index: int, engine: Any):
        self.index, self.engine = index, engine
        self.job: Job | None = None
        self.kv_stats: dict = {}        # a snapshot after each job (read by /metrics)
        self.mtp_stats: dict = {}       # the same of its MTP block, where it has one
        self.n_jobs = 0
        self._snapshot()

    @property
    def busy(self) -> bool:
        return self.job is not None

    def _snapshot(self) -> None:
        stats = getattr(self.engine, "kv_stats", None)
        ctx = getattr(self.engine, "_ctx", None)
        try:
            if stats is not None:
                self.kv_stats = stats()
            if getattr(ctx, "mtp", False):
                self.mtp_stats = ctx.mtp_stats()
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
        self._threads = [threading.Thread(target=self._work, args=(s,), daemon=True,
                                          name=f"pyllamakv-slot-{s.index}") for s in self.slots]
        for t in self._threads:
            t.start()

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
        else:
            job.put("end")
        finally:
            if items is not None and hasattr(items, "close"):
                items.close()      # in this thread: the engine is this slot's alone
            slot.engine.job = None
            slot._snapshot()

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
