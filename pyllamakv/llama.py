"""Llama: llama-cpp-python's interface over one Model and one Context.

Generation runs in three named stages: ``_prefill`` (a token list, in n_batch
slices), ``_decode_one`` (one sampled token) and ``_sample`` (logits -> id).
``generate`` strings them together and reuses the longest prefix of the new
tokens that the KV cache already holds; completion and chat build on it and
shape the result with completion.py.
"""
from __future__ import annotations

import itertools
import sys
import time
from typing import Iterator, Sequence

import numpy as np

from . import _native
from .chat import CHATML_TEMPLATE, ChatFormatter
from .completion import completion_pieces
from .response import Usage, chat_chunks, chat_response, completion_chunks, completion_response
from .config import LlamaConfig, choose_device, requested_pool_bytes
from .default_model import default_model_path
from .plan import auto_pool_bytes, kv_plan
from .sampling import Sampler, SamplingParams
from .spec_decode import speculative_tokens
from .speculative import make_drafter
from .state import LlamaState, Timings
from .tokenizer import Tokenizer


class Llama:
    """A GGUF model ready to generate. ``model_path=None``: the default model."""

    def __init__(self, model_path: str | None = None, *, n_ctx: int = 512, n_batch: int = 512,
                 n_ubatch: int = 512, n_threads: int | None = None, device: str = "auto",
                 type_k: str | int = "f16", type_v: str | int = "f16",
                 kv_pool_mib: float | str | None = None, seed: int = -1,
                 logits_all: bool = False, verbose: bool = False,
                 n_gpu_layers: int | None = None, chat_format: str | None = None,
                 flash_attn: bool = True, use_mmap: bool = True, use_mlock: bool = False,
                 gpu_kernels: str = "exact", draft_model=None):
        self._ctx = self._model = None
        self.verbose = bool(verbose)
        self.config = cfg = LlamaConfig(n_ctx, n_batch, n_ubatch, n_threads, device, type_k,
                                        type_v, kv_pool_mib, seed, bool(logits_all), n_gpu_layers,
                                        gpu_kernels)
        if chat_format not in (None, "chatml"):
            raise ValueError(f"chat_format {chat_format!r} is not supported; use None (the "
                             "model's own template) or 'chatml'")
        _native.type_id(type_k, kv=True), _native.type_id(type_v, kv=True)  # fail before loading
        self.model_path = str(model_path) if model_path is not None else default_model_path()
        t0 = time.perf_counter()
        file = _native.GGUFFile(self.model_path)
        hp = _native.model_params(file)
        self.device = choose_device(cfg, hp["n_layer"], _native.cuda_device_count())
        self._model = _native.Model(file, self.device, n_threads)
        self.metadata = file.metadata
        self._n_ctx = cfg.n_ctx or hp["n_ctx_train"] or 4096
        if cfg.kv_pool_mib == "auto":
            pool = auto_pool_bytes(hp, self._n_ctx, self.device, type_k=type_k, type_v=type_v,
                                   n_ubatch=min(n_ubatch, n_batch))
        else:
            pool = requested_pool_bytes(cfg)
            if pool is not None:   # the planner's own check: a clear minimum before allocating
                kv_plan(hp, self._n_ctx, type_k=type_k, type_v=type_v, pool_bytes=pool,
                        n_ubatch=min(n_ubatch, n_batch))
        self.kv_pool_bytes = pool
        self._ctx = _native.Context(self._model, self._n_ctx, n_batch, min(n_ubatch, n_batch),
                                    n_threads, type_k, type_v, 0, cfg.logits_all, pool,
                                    cfg.gpu_kernels)
        self.tokenizer = Tokenizer.from_metadata(file.metadata)
        self.chat_format = chat_format
        self._chat = ChatFormatter.from_metadata(
            {"tokenizer.chat_template": CHATML_TEMPLATE} if chat_format == "chatml"
            else file.metadata, self.tokenizer)
        n_vocab = self._model.n_vocab
        self._input_ids = np.zeros(self._n_ctx, np.int32)
        self._scores = np.zeros((self._n_ctx if cfg.logits_all else 1, n_vocab), np.float32)
        self._n_tokens = 0
        self._rng = np.random.default_rng(None if cfg.random_seed else cfg.seed)
        self.timings = Timings()
        self.draft_model = make_drafter(draft_model, self)   # speculative.py; None: off
        if self.verbose:
            print(f"pyllamakv: loaded {self.model_path} on {self.device} in "
                  f"{time.perf_counter() - t0:.1f} s (n_ctx={self._n_ctx}, "
                  f"kv pool={'all resident' if pool is None else f'{pool / 2**20:.1f} MiB'})",
                  file=sys.stderr)

    # ------------------------------------------------------------ sizes and tokens

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def n_embd(self) -> int:
        return self._model.hparams["n_embd"]

    def token_bos(self) -> int:
        return -1 if self.tokenizer.bos_id is None else self.tokenizer.bos_id

    def token_eos(self) -> int:
        return -1 if self.tokenizer.eos_id is None else self.tokenizer.eos_id

    @property
    def n_tokens(self) -> int:
        return self._n_tokens

    @property
    def input_ids(self) -> np.ndarray:
        return self._input_ids[:self._n_tokens]

    @property
    def scores(self) -> np.ndarray:
        """Logits (n_tokens, n_vocab) with logits_all; else (1, n_vocab): the last token's."""
        return self._scores[:self._n_tokens] if self.config.logits_all else self._scores

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        if not isinstance(text, (bytes, bytearray, str)):
            raise TypeError(f"text must be bytes, not {type(text).__name__}")
        return self.tokenizer.encode(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        return self.tokenizer.decode(tokens, special=special)

    # ------------------------------------------------------------ stages

    def eval(self, tokens: Sequence[int]) -> None:
        """Run tokens through the model after those already in the cache."""
        tokens = [int(t) for t in tokens]
        if self._n_tokens + len(tokens) > self._n_ctx:
            raise ValueError(f"{self._n_tokens} cached + {len(tokens)} new tokens exceed "
                             f"the context window (n_ctx={self._n_ctx})")
        n_vocab = self.n_vocab()
        for t in tokens:
            if not 0 <= t < n_vocab:
                raise ValueError(f"token id {t} out of range [0, {n_vocab})")
        step = self.config.n_batch
        for i in range(0, len(tokens), step):
            part = tokens[i:i + step]
            self._ctx.decode(part)
            n0, rows = self._n_tokens, self._ctx.logits()
            self._input_ids[n0:n0 + len(part)] = part
            if self.config.logits_all:
                self._scores[n0:n0 + len(part)] = rows
            else:
                self._scores[0] = rows[-1]
            self._n_tokens += len(part)

    def _prefill(self, tokens: Sequence[int]) -> None:
        t0 = time.perf_counter()
        self.eval(tokens)
        self.timings.prefill_s += time.perf_counter() - t0
        self.timings.prefill_tokens += len(tokens)

    def _decode_one(self, token: int) -> None:
        t0 = time.perf_counter()
        self.eval([token])
        self.timings.decode_s += time.perf_counter() - t0
        self.timings.decode_tokens += 1

    def _last_logits(self) -> np.ndarray:
        return self._scores[self._n_tokens - 1 if self.config.logits_all else 0]

    def _sample(self, sampler: Sampler) -> int:
        t0 = time.perf_counter()
        token = sampler.sample(self._last_logits(), self.input_ids)
        self.timings.sample_s += time.perf_counter() - t0
        return token

    def _truncate(self, n: int) -> None:
        self._ctx.truncate(n)
        self._n_tokens = n

    def reset(self) -> None:
        """Forget every token (the KV cache is cleared)."""
        self._truncate(0)

    # ------------------------------------------------------------ generation

    def sampler(self, *, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                min_p: float = 0.05, typical_p: float = 1.0, repeat_penalty: float = 1.0,
                presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                logit_bias: dict | None = None, seed: int | None = None) -> Sampler:
        """A Sampler; without a seed it draws one from the Llama's own generator."""
        if seed is None or seed == -1:
            seed = int(self._rng.integers(0, 2**32))
        p = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                           typical_p=typical_p, repeat_penalty=repeat_penalty,
                           presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                           logit_bias={int(k): float(v) for k, v in (logit_bias or {}).items()},
                           seed=int(seed))
        return Sampler(p, self.n_vocab())

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, typical_p: float = 1.0, temp: float = 0.8,
                 repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: dict | None = None, seed: int | None = None,
                 sampler: Sampler | None = None) -> Iterator[int]:
        """Yield sampled token ids after tokens, without end; the caller stops.

        With reset (the default) the longest prefix of tokens already in the
        cache is kept and only the rest is evaluated (at least the last token,
        for its logits); reset=False appends tokens to what the cache holds.
        """
        tokens = [int(t) for t in tokens]
        self.timings = Timings()
        if sampler is None:
            sampler = self.sampler(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p,
                                   typical_p=typical_p, repeat_penalty=repeat_penalty,
                                   presence_penalty=presence_penalty,
                                   frequency_penalty=frequency_penalty,
                                   logit_bias=logit_bias, seed=seed)
        if reset:
            held = self.input_ids
            n = min(len(held), len(tokens))
            diff = np.nonzero(held[:n] != np.asarray(tokens[:n], np.int32))[0]
            keep = int(diff[0]) if diff.size else n
            keep = min(keep, len(tokens) - 1)
            if keep < 0:
                raise ValueError("generate needs at least one token")
            self._truncate(keep)
            tokens = tokens[keep:]
        if not tokens and self._n_tokens == 0:
            raise ValueError("generate needs at least one token")
        self._prefill(tokens)
        if self.draft_model is not None and not self.config.logits_all:   # spec_decode.py
            yield from speculative_tokens(self, sampler, self.draft_model)
        while True:
            token = self._sample(sampler)
            yield token
            self._decode_one(token)

    # ------------------------------------------------------------ completion

    def _prompt_tokens(self, prompt: str | bytes | Sequence[int]) -> list[int]:
        if isinstance(prompt, (str, bytes)):
            return self.tokenize(prompt.encode() if isinstance(prompt, str) else prompt,
                                 add_bos=True, special=True)
        return [int(t) for t in prompt]

    def create_completion(self, prompt: str | bytes | Sequence[int], suffix: None = None,
                          max_tokens: int | None = 16, temperature: float = 0.8,
                          top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None,
                          logit_bias: dict | None = None, model: str | None = None):
        """A text completion dict, or with stream=True an iterator of chunks."""
        if suffix is not None:
            raise ValueError("suffix is not supported")
        tokens = self._prompt_tokens(prompt)
        sampler = self.sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                               typical_p=typical_p, repeat_penalty=repeat_penalty,
                               presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty, logit_bias=logit_bias,
                               seed=seed)
        usage = Usage()
        pieces = completion_pieces(self, tokens, usage, max_tokens, stop, echo, logprobs, sampler)
        first = next(pieces)   # runs the checks and the prefill now, not at first iteration
        pieces = itertools.chain([first], pieces)
        name = model or self.model_path
        if stream:
            return completion_chunks(pieces, name, usage, logprobs is not None)
        return completion_response(pieces, name, usage, logprobs is not None)

    __call__ = create_completion

    def create_chat_completion(self, messages: list[dict], temperature: float = 0.2,
                               top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                               typical_p: float = 1.0, stream: bool = False,
                               stop: str | list[str] | None = None, seed: int | None = None,
                               max_tokens: int | None = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0,
                               logit_bias: dict | None = None, logprobs: bool = False,
                               top_logprobs: int | None = None, model: str | None = None):
        """A chat.completion dict, or with stream=True an iterator of chunks."""
        chat = self._chat.format(messages, add_generation_prompt=True)
        tokens = self.tokenize(chat.prompt.encode(), add_bos=not chat.added_special, special=True)
        stops = list(chat.stop) + ([stop] if isinstance(stop, str) else list(stop or []))
        sampler = self.sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                               typical_p=typical_p, repeat_penalty=repeat_penalty,
                               presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty, logit_bias=logit_bias,
                               seed=seed)
        n_lp = (top_logprobs or 0) if logprobs else None
        usage = Usage()
        pieces = completion_pieces(self, tokens, usage, max_tokens, stops, False, n_lp, sampler,
                              chat.stop_token_ids)
        pieces = itertools.chain([next(pieces)], pieces)
        name = model or self.model_path
        if stream:
            return chat_chunks(pieces, name, usage, logprobs)
        return chat_response(pieces, name, usage, logprobs)

    # ------------------------------------------------------------ state

    def save_state(self) -> LlamaState:
        rows = self.scores.copy()
        return LlamaState(self.input_ids.copy(), rows, self._n_tokens, self._ctx.state_get(),
                          self._n_ctx)

    def load_state(self, state: LlamaState) -> None:
        if state.scores.shape[-1] != self.n_vocab() or state.n_tokens > self._n_ctx:
            raise ValueError(f"the state ({state.n_tokens} tokens, {state.scores.shape[-1]} "
                             f"logits) does not fit this Llama (n_ctx={self._n_ctx}, "
                             f"n_vocab={self.n_vocab()})")
        self._ctx.state_set(state.llama_state)
        n = state.n_tokens
        self._input_ids[:n] = state.input_ids[:n]
        if self.config.logits_all and len(state.scores) == n:
            self._scores[:n] = state.scores
        elif n:
            self._scores[0 if not self.config.logits_all else n - 1] = state.scores[-1]
        self._n_tokens = n

    def kv_stats(self) -> dict:
        """The KV cache's residency and streaming counters (see Context.kv_stats)."""
        return self._ctx.kv_stats()

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Free the context and the model (idempotent)."""
        # Dropping the last references frees both through their ffi.gc
        # destructors, the context first (it holds the model). Context.close()
        # is not called: with cffi 2 it hands NULL to the free function.
        self._ctx = self._model = None

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
