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
from .chat import ChatFormatter
from .chat_formats import chat_format_template
from .compat import UnsupportedFeature, check_extra_kwargs
from .completion import completion_pieces
from .response import (Usage, chat_chunks, chat_response, chunks_of, completion_chunks,
                       completion_response, with_tool_calls)
from .config import LlamaConfig, choose_device, requested_pool_bytes
from .default_model import default_model_path
from .embedding import create_embedding, embed
from .progress import ProgressCallback
from .embedding import pooling_type as embedding_pooling
from .hub import hub_file
from .grammar import GrammarConstraint, LlamaGrammar, response_format_grammar
from .tools import normalize_messages, plan_tools
from .plan import auto_pool_bytes, kv_plan
from .sampling import Sampler, SamplingParams
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
                 gpu_kernels: str = "exact", embedding: bool = False,
                 pooling_type: int | str = -1, draft_model=None,
                 progress_callback: ProgressCallback | None = None,
                 **llama_cpp_kwargs):
        self._ctx = self._model = None
        self.verbose = bool(verbose)
        self.config = cfg = LlamaConfig(n_ctx, n_batch, n_ubatch, n_threads, device, type_k,
                                        type_v, kv_pool_mib, seed, bool(logits_all), n_gpu_layers,
                                        gpu_kernels)
        check_extra_kwargs("Llama", llama_cpp_kwargs)
        if draft_model is not None:
            raise UnsupportedFeature("Llama: draft_model (speculative decoding) is not "
                                     "implemented yet")
        fmt = None if chat_format is None else chat_format_template(chat_format)
        _native.type_id(type_k, kv=True), _native.type_id(type_v, kv=True)  # fail before loading
        self.model_path = str(model_path) if model_path is not None else default_model_path()
        self.progress_callback = progress = progress_callback or (lambda *a: None)
        t0 = time.perf_counter()
        progress("load", 0, 4)
        file = _native.GGUFFile(self.model_path)
        progress("load", 1, 4)
        hp = _native.model_params(file)
        self.device = choose_device(cfg, hp["n_layer"], _native.cuda_device_count())
        self._model = _native.Model(file, self.device, n_threads)
        progress("load", 2, 4)
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
                                    n_threads, type_k, type_v, 0, cfg.logits_all or embedding,
                                    pool, cfg.gpu_kernels, embeddings=embedding)
        progress("load", 3, 4)
        self.tokenizer = Tokenizer.from_metadata(file.metadata)
        self.embedding = bool(embedding)
        self.cache = None
        self.pooling_type = embedding_pooling(pooling_type, file.metadata)
        self.chat_format = chat_format
        self._chat = ChatFormatter.from_metadata(
            file.metadata if fmt is None else {"tokenizer.chat_template": fmt[0]},
            self.tokenizer, extra_stop=fmt[1] if fmt else (),
            source=None if fmt is None else f"chat_format {chat_format!r}")
        n_vocab = self._model.n_vocab
        self._input_ids = np.zeros(self._n_ctx, np.int32)
        self._scores = np.zeros((self._n_ctx if cfg.logits_all else 1, n_vocab), np.float32)
        self._n_tokens = 0
        self._rng = np.random.default_rng(None if cfg.random_seed else cfg.seed)
        self.timings = Timings()
        progress("load", 4, 4)
        if self.verbose:
            print(f"pyllamakv: loaded {self.model_path} on {self.device} in "
                  f"{time.perf_counter() - t0:.1f} s (n_ctx={self._n_ctx}, "
                  f"kv pool={'all resident' if pool is None else f'{pool / 2**20:.1f} MiB'})",
                  file=sys.stderr)

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str, local_dir=None, cache_dir=None,
                        **kwargs) -> "Llama":
        """A GGUF of a Hugging Face Hub repository (hub.py), loaded with kwargs."""
        return cls(hub_file(repo_id, filename, local_dir, cache_dir), **kwargs)

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

    def token_nl(self) -> int:
        """The id of the newline token."""
        return self.tokenizer.encode("\n", add_bos=False)[-1]

    def set_cache(self, cache) -> None:
        """Keep states by prompt prefix (cache.LlamaRAMCache; None: no cache)."""
        self.cache = cache

    def _from_cache(self, tokens: Sequence[int]) -> None:
        """Load the cached state that shares more of tokens than the context holds."""
        if self.cache is None:
            return
        state, n = self.cache.lookup(tokens)
        held = self.input_ids
        m = min(len(held), len(tokens))
        diff = np.nonzero(held[:m] != np.asarray(tokens[:m], np.int32))[0]
        if state is not None and n > (int(diff[0]) if diff.size else m):
            self.load_state(state)

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
        if self.embedding:
            raise RuntimeError("this Llama was created with embedding=True: it computes "
                               "embeddings (embed, create_embedding), not logits")
        if self._n_tokens + len(tokens) > self._n_ctx:
            raise ValueError(f"{self._n_tokens} cached + {len(tokens)} new tokens exceed "
                             f"the context window (n_ctx={self._n_ctx})")
        n_vocab = self.n_vocab()
        for t in tokens:
            if not 0 <= t < n_vocab:
                raise ValueError(f"token id {t} out of range [0, {n_vocab})")
        step = self.config.n_batch
        report = len(tokens) > step
        if report:
            self.progress_callback("prefill", 0, len(tokens))
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
            if report:
                self.progress_callback("prefill", i + len(part), len(tokens))

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
                logit_bias: dict | None = None, seed: int | None = None,
                grammar: LlamaGrammar | None = None, mirostat_mode: int = 0,
                mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                logits_processor=None) -> Sampler:
        """A Sampler; without a seed it draws one from the Llama's own generator.
        With a grammar (grammar.LlamaGrammar) it samples only tokens the grammar allows."""
        if seed is None or seed == -1:
            seed = int(self._rng.integers(0, 2**32))
        p = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                           typical_p=typical_p, repeat_penalty=repeat_penalty,
                           presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                           logit_bias={int(k): float(v) for k, v in (logit_bias or {}).items()},
                           seed=int(seed), mirostat_mode=mirostat_mode,
                           mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta)
        constraint = None
        if grammar is not None:
            if not isinstance(grammar, LlamaGrammar):
                raise TypeError(f"grammar must be a LlamaGrammar, not {type(grammar).__name__}")
            constraint = GrammarConstraint(grammar, self.tokenizer, self.n_vocab())
        procs = [] if logits_processor is None else (
            list(logits_processor) if isinstance(logits_processor, (list, tuple))
            else [logits_processor])
        return Sampler(p, self.n_vocab(), constraint, procs)

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
            keep = self._ctx.restore_point(keep)   # hybrids: the latest snapshot at or before
            self._truncate(keep)
            tokens = tokens[keep:]
        if not tokens and self._n_tokens == 0:
            raise ValueError("generate needs at least one token")
        if self._ctx.recurrent_bytes and len(tokens) > 1:
            # hybrids: a snapshot before the prompt's last token, where the next
            # prompt sharing this one (or this one again) can start
            self._prefill(tokens[:-1])
            self._ctx.snapshot()
            tokens = tokens[-1:]
        self._prefill(tokens)
        while True:
            token = self._sample(sampler)
            yield token
            self._decode_one(token)

    # ------------------------------------------------------------ completion

    def _prompt_tokens(self, prompt: str | bytes | Sequence[int]) -> list[int]:
        if isinstance(prompt, (str, bytes)):
            return self.tokenizer.encode(prompt.encode() if isinstance(prompt, str) else prompt,
                                         add_bos=True, special=True, max_tokens=self._n_ctx)
        return [int(t) for t in prompt]

    def create_completion(self, prompt: str | bytes | Sequence[int], suffix: None = None,
                          max_tokens: int | None = 16, temperature: float = 0.8,
                          top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None,
                          logit_bias: dict | None = None, model: str | None = None,
                          grammar: LlamaGrammar | None = None, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          logits_processor=None, stopping_criteria=None, **llama_cpp_kwargs):
        """A text completion dict, or with stream=True an iterator of chunks."""
        check_extra_kwargs("create_completion", llama_cpp_kwargs)
        if suffix is not None:
            raise ValueError("suffix is not supported")
        tokens = self._prompt_tokens(prompt)
        sampler = self.sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                               typical_p=typical_p, repeat_penalty=repeat_penalty,
                               presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty, logit_bias=logit_bias,
                               seed=seed, grammar=grammar, mirostat_mode=mirostat_mode,
                               mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                               logits_processor=logits_processor)
        usage = Usage()
        self._from_cache(tokens)
        pieces = completion_pieces(self, tokens, usage, max_tokens, stop, echo, logprobs, sampler,
                                   stopping_criteria=stopping_criteria)
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
                               top_logprobs: int | None = None, model: str | None = None,
                               response_format: dict | None = None,
                               grammar: LlamaGrammar | None = None, tools: list | None = None,
                               tool_choice: str | dict | None = None,
                               functions: list | None = None,
                               function_call: str | dict | None = None,
                               mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                               mirostat_eta: float = 0.1, logits_processor=None,
                               stopping_criteria=None, **llama_cpp_kwargs):
        """A chat.completion dict, or with stream=True an iterator of chunks.
        response_format / grammar constrain the reply (grammar.py); tools,
        tool_choice and the legacy functions / function_call give tool calls
        (tools.py)."""
        check_extra_kwargs("create_chat_completion", llama_cpp_kwargs)
        plan = plan_tools(self._chat.template, tools, tool_choice, functions, function_call)
        if plan is not None and plan.grammar is not None:
            grammar = plan.grammar
        elif response_format is not None:
            if grammar is not None:
                raise ValueError("give response_format or grammar, not both")
            grammar = response_format_grammar(response_format)
        chat = self._chat.format(normalize_messages(messages, plan), add_generation_prompt=True,
                                 **(plan.template_vars if plan else {}))
        prompt = chat.prompt + (plan.prompt_suffix if plan else "")
        tokens = self.tokenizer.encode(prompt.encode(), add_bos=not chat.added_special,
                                       special=True, max_tokens=self._n_ctx)
        stops = list(chat.stop) + ([stop] if isinstance(stop, str) else list(stop or []))
        sampler = self.sampler(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                               typical_p=typical_p, repeat_penalty=repeat_penalty,
                               presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty, logit_bias=logit_bias,
                               seed=seed, grammar=grammar, mirostat_mode=mirostat_mode,
                               mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                               logits_processor=logits_processor)
        n_lp = (top_logprobs or 0) if logprobs else None
        usage = Usage()
        self._from_cache(tokens)
        pieces = completion_pieces(self, tokens, usage, max_tokens, stops, False, n_lp, sampler,
                                   chat.stop_token_ids, stopping_criteria=stopping_criteria)
        pieces = itertools.chain([next(pieces)], pieces)
        name = model or self.model_path
        if plan is not None:
            reply = with_tool_calls(chat_response(pieces, name, usage, logprobs), plan)
            return chunks_of(reply) if stream else reply
        if stream:
            return chat_chunks(pieces, name, usage, logprobs)
        return chat_response(pieces, name, usage, logprobs)

    def embed(self, input: str | list[str], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """Embeddings of input (embedding.py); needs embedding=True."""
        return embed(self, input, normalize, truncate, return_count)

    def create_embedding(self, input: str | list[str], model: str | None = None) -> dict:
        """OpenAI's embedding response for input; needs embedding=True."""
        return create_embedding(self, input, model)

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
