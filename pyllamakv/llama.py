"""Llama: llama-cpp-python's interface over an engine (engine/engine.py) and one
of its sequences (sequence 0 of its own engine). The engine is opened from the
Llama's settings by engine/open.py (device, memory budget, model, KV pool and
n_ubatch, context), as the server opens its one; the Llama adds the text
parts (tokenizer, chat template) and llama-cpp-python's methods.

Generation runs on the Llama's sequence through api/decoding.py (its named
stages: prefill, decode_one, sample; the core's loop; speculation),
given the Llama's settings. ``generate`` reuses the longest cached prefix; the
OpenAI-style requests (completion, chat, embeddings) build on it, through
functions that take the sequence (completion.py, embedding.py).

Threads: a Llama may be shared; its calls are serialised and a stream keeps
other threads waiting until it ends (guard.py says exactly how). Python's
token bookkeeping is read from the C context (sequence.py), so an interrupt
anywhere leaves the two in agreement.
"""
from __future__ import annotations

import random
import time
from typing import Iterator, Sequence

import numpy as np

from .core import native as _native
from .core.vocab_context import VOCAB_ONLY, VocabOnlyContext
from .text.chat_handlers import llama_chat_formatter
from .text.llama_tokenizer import llama_tokenizers
from .api.llama_cpp_methods import LlamaCppMethods
from .api.sequence_methods import SequenceMethods
from .api.compat import check_extra_kwargs
from .config import LlamaConfig, tokens_arg
from .default_model import default_model_path
from .api.embedding import pooling_type as embedding_pooling
from .errors import ClosedError, ParameterTypeError
from .api.grammar import LlamaGrammar
from .engine.guard import Guard, guarded
from .engine.engine import Engine
from .engine.open import open_engine
from .engine.sequence import common_prefix
from .hub import hub_file
from .api.openai_api import OpenAIMethods
from .api.decoding import Decoding, token_stream
from .progress import ProgressCallback, report_load
from .engine.sampling import Sampler
from .spec.mtp import wants_mtp
from .spec.drafters import make_drafter
from .engine.state import Timings


class Llama(LlamaCppMethods, OpenAIMethods, SequenceMethods):
    """A GGUF model ready to generate. ``model_path=None``: the default model."""

    def __init__(self, model_path: str | None = None, *, n_ctx: int = 512, n_batch: int = 512,
                 n_ubatch: int | None = None, n_threads: int | None = None, device: str = "auto",
                 type_k: str | int = "f16", type_v: str | int = "f16",
                 kv_pool_mib: float | str | None = None, seed: int = -1,
                 logits_all: bool = False, verbose: bool = False,
                 n_gpu_layers: int | None = None, chat_format: str | None = None,
                 flash_attn: bool = True, use_mmap: bool = True, use_mlock: bool = False,
                 gpu_kernels: str = "fast", embedding: bool = False,
                 pooling_type: int | str = -1, draft_model=None,
                 gpu_memory_mib: float | None = None, n_seq_max: int = 1,
                 n_cpu_moe: int | None = None, progress_callback: ProgressCallback | None = None,
                 vocab_only: bool = False, chat_handler=None,
                 _model: "_native.Model | None" = None, _engine: Engine | None = None,
                 **llama_cpp_kwargs):
        self._init_kwargs = {k: v for k, v in locals().items() if k not in (
            "self", "_model", "_engine", "progress_callback", "llama_cpp_kwargs")}
        self._init_kwargs.update(llama_cpp_kwargs)
        self._ctx = self._model = None
        self._guard = Guard("Llama")
        self.verbose = bool(verbose)
        self.config = cfg = LlamaConfig(n_ctx, n_batch, n_ubatch, n_threads, device, type_k,
                                        type_v, kv_pool_mib, seed, logits_all, n_gpu_layers,
                                        gpu_kernels, gpu_memory_mib, n_seq_max, n_cpu_moe)
        check_extra_kwargs("Llama", llama_cpp_kwargs)
        self.model_path = str(model_path) if model_path is not None else default_model_path()
        self.progress_callback = progress = progress_callback or (lambda *a: None)
        t0 = time.perf_counter()
        progress("load", 0, 4)
        if _model is None:
            file = _native.GGUFFile(self.model_path)
            progress("load", 1, 4)
            if vocab_only:   # the tokenizer and the chat template, no weights and no context
                self._text_setup(file.metadata, chat_format, chat_handler, -1, False)
                self._n_ctx, self._n_vocab = cfg.n_ctx, self.tokenizer.n_vocab
                self.metadata, self.draft_model = file.string_metadata, None
                self._ctx, self._seed = VocabOnlyContext(self.tokenizer, self._n_ctx), cfg.seed
                return
        # the device, the budget (gpu_memory_mib: every part's share, checked before the
        # weights load), the model, the pool and n_ubatch, the context: engine/open.py.
        # _model: a loaded model to make the context over (the server's); _engine: an
        # engine to take a sequence of, its pool planned for n_seq_max sequences
        self._engine = open_engine(file if _model is None else _model, cfg,
                                   embeddings=embedding, wide_logits=draft_model is not None,
                                   mtp=wants_mtp(draft_model), engine=_engine,
                                   progress=progress)
        plan, self._model = self._engine.plan, self._engine.model
        self.device, self._n_ctx, self.memory = plan.device, plan.n_ctx, plan.memory
        self.n_cpu_moe = plan.n_cpu_moe
        self.kv_pool_bytes = plan.kv_pool_bytes   # None: all resident
        self.metadata = self._model.file.string_metadata   # llama-cpp-python's; typed: .file
        self._seq = self._engine.open(keep_all=cfg.logits_all)
        self._ctx = self._engine.ctx
        progress("load", 3, 4)
        self._text_setup(self._model.file.metadata, chat_format, chat_handler, pooling_type, embedding)
        self._n_vocab = self._model.n_vocab
        self._seed = random.SystemRandom().randint(0, 2**32 - 1) if cfg.random_seed else cfg.seed
        self.timings = Timings()
        self.draft_model = make_drafter(draft_model, self._seq)   # None: off
        progress("load", 4, 4)
        if self.verbose:
            report_load(self, time.perf_counter() - t0)

    def _text_setup(self, metadata: dict, chat_format, chat_handler, pooling_type,
                    embedding: bool) -> None:
        """The parts that need only the file's metadata (all of a vocab_only Llama)."""
        self.tokenizer, self.tokenizer_ = llama_tokenizers(metadata, self._init_kwargs)
        self.embedding = bool(embedding)
        self.cache = None
        self._pooling = embedding_pooling(pooling_type, metadata)
        self._chat, self.chat_format = llama_chat_formatter(chat_format, metadata, self.tokenizer)
        if chat_handler is not None and not callable(chat_handler):
            raise ParameterTypeError("chat_handler must be callable (llama_chat_format's "
                                     f"handler protocol), not {type(chat_handler).__name__}")
        self.chat_handler = chat_handler

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: str, local_dir=None, cache_dir=None,
                        **kwargs) -> "Llama":
        """A GGUF of a Hugging Face Hub repository (hub.py), loaded with kwargs."""
        return cls(hub_file(repo_id, filename, local_dir, cache_dir), **kwargs)

    # ------------------------------------------------------------ sizes and tokens

    def _open(self) -> None:
        if self._guard.closed:
            raise ClosedError("the Llama is closed")

    def n_ctx(self) -> int:
        self._open()
        return self._n_ctx

    def n_vocab(self) -> int:
        self._open()
        return self._n_vocab

    @property
    def chat_template_formatter(self):
        """The chat template chat requests render through (text/chat.py's ChatFormatter,
        or the chat_format's): api/chat_request.py's template."""
        return self._chat

    def pooling_type(self) -> int:
        """The embedding pooling in use (llama.cpp's LLAMA_POOLING_TYPE_* number)."""
        return self._pooling

    @property
    def _is_hybrid(self) -> bool:   # llama-cpp-python's name: recurrent and attention layers
        return bool(self._ctx is not None and self._ctx.recurrent_bytes)

    _is_recurrent = False           # a model with only recurrent layers: none load here

    def n_embd(self) -> int:
        self._open()
        return self._model.hparams["n_embd"]

    def set_cache(self, cache) -> None:
        """Keep states by prompt prefix (cache.LlamaRAMCache; None: no cache)."""
        self.cache = cache

    def load_cached_prefix(self, tokens: Sequence[int]) -> None:
        """Load the cached state that shares more of tokens than the context holds."""
        if self.cache is None:
            return
        state, n = self.cache.lookup(tokens)
        if state is not None and n > common_prefix(self.input_ids, tokens):
            self.load_state(state)

    @property
    @guarded
    def n_tokens(self) -> int:
        return self._seq.n

    @property
    @guarded
    def input_ids(self) -> np.ndarray:
        return self._seq.input_ids()

    @property
    @guarded
    def scores(self) -> np.ndarray:
        """Logits (n_tokens, n_vocab) with logits_all; else (1, n_vocab): the last token's."""
        return self._seq.scores()

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        self._open()
        if not isinstance(text, (bytes, bytearray, str)):
            raise ParameterTypeError(f"text must be bytes, not {type(text).__name__}")
        return self.tokenizer.encode(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        """The text of tokens; with prev_tokens, the text tokens add after those."""
        self._open()
        tokens = tokens_arg("tokens", tokens, self._n_vocab)
        if prev_tokens:
            prev_tokens = tokens_arg("prev_tokens", prev_tokens, self._n_vocab)
        return self.tokenizer_.detokenize(tokens, prev_tokens, special=special)

    # ------------------------------------------------------------ stages

    @guarded
    def eval(self, tokens: Sequence[int]) -> None:
        """Run tokens through the model after those already in the cache."""
        self._logits_mode()
        self._seq.eval(tokens_arg("tokens", tokens, self._n_vocab),
                        self.progress_callback)

    def _logits_mode(self) -> None:
        if self._ctx is None or isinstance(self._ctx, VocabOnlyContext):
            raise RuntimeError(VOCAB_ONLY)
        if self.embedding:
            raise RuntimeError("this Llama was created with embedding=True: it computes "
                               "embeddings (embed, create_embedding), not logits")

    def _embedding_mode(self) -> None:
        if not self.embedding:
            raise RuntimeError("Llama must be created with embedding=True to compute embeddings")

    def _decoding(self) -> Decoding:
        """This Llama's settings for a generation on its sequence (api/decoding.py)."""
        return Decoding(self.draft_model, self.config.logits_all, self.progress_callback,
                        greedy_in_core=getattr(self, "greedy_in_core", True))

    @guarded
    def reset(self) -> None:
        """Forget every token (the KV cache is cleared, every sequence's; of a
        shared engine, this Llama's)."""
        for seq in [self._seq] + ([] if self._engine.shared else self._engine.others(self._seq)):
            seq.reset()

    # ------------------------------------------------------------ generation

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, typical_p: float = 1.0, temp: float = 0.8,
                 repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: dict | None = None, seed: int | None = None,
                 sampler: Sampler | None = None, tfs_z: float = 1.0, mirostat_mode: int = 0,
                 mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, penalize_nl: bool = True,
                 logits_processor=None, stopping_criteria=None,
                 grammar: LlamaGrammar | None = None) -> Iterator[int]:
        """Yield sampled token ids after tokens, without end; the caller stops.

        With reset (the default) the longest prefix of tokens already in the
        cache is kept and only the rest is evaluated (at least the last token,
        for its logits); reset=False appends tokens to what the cache holds.
        The stream holds the Llama until it is closed (see guard.py). A
        stopping_criteria(input_ids, logits) that returns True ends the stream
        before the token just sampled (as llama-cpp-python).
        """
        tokens = tokens_arg("tokens", tokens, self.n_vocab())
        if sampler is None:
            sampler = self.sampler(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p,
                                   typical_p=typical_p, repeat_penalty=repeat_penalty,
                                   presence_penalty=presence_penalty,
                                   frequency_penalty=frequency_penalty,
                                   logit_bias=logit_bias, seed=seed, grammar=grammar,
                                   mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                                   mirostat_eta=mirostat_eta, logits_processor=logits_processor)
        return self._guard.stream(lambda: self.token_stream(tokens, sampler, reset,
                                                         stopping_criteria))

    def token_stream(self, tokens: list[int], sampler: Sampler, reset: bool = True,
                     stopping_criteria=None, limit: int | None = None,
                     ends=None) -> Iterator[int]:
        """generate's ids for a Sampler: api/decoding.py's token_stream on this
        Llama's sequence (completion.py's stream; ends: greedy_loop.py)."""
        self._logits_mode()
        d = self._decoding()
        self.timings = d.timings
        yield from token_stream(self._seq, tokens, sampler, d, reset, stopping_criteria,
                                limit, ends)

    # ------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Free the context and the model (idempotent). Waits for a call in
        progress on another thread; later calls raise ClosedError."""
        guard = getattr(self, "_guard", None)
        if guard is None:
            return

        def free() -> None:
            if getattr(self, "_seq", None) is not None:
                self._engine.release(self._seq)
            elif self._ctx is not None:    # vocab_only's stand-in
                self._ctx.close()
            if self._model is not None:
                self._model.close()
        guard.close(free)

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
