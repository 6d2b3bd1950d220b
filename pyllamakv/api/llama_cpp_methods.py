"""Llama's methods that exist for llama-cpp-python's interface (a mixin of Llama).

They are thin: each states llama-cpp-python's semantics over the Llama's own
public methods (``sampler``, ``scores``, ``input_ids``, ``create_chat_completion``).

- ``set_seed(seed)``: the seed of the next sampling call that names none; each
  such call then moves the seed on (a seeded chain), and ``save_state`` /
  ``load_state`` carry it, so a completion after ``load_state`` repeats the one
  after ``save_state``.
- ``sample(..., idx=None)``: one token from the logits after position idx
  (default: the last evaluated token; other rows need logits_all=True).
- pickling: a Llama pickles as its constructor's arguments and is rebuilt from
  them (the model is loaded again; the context starts empty), as in
  llama-cpp-python.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Sequence

import numpy as np

from ..engine.sequence import common_prefix
from ..engine.sampling import Sampler
from ..errors import ParameterError, ParameterTypeError
from .grammar import LlamaGrammar
from .samplers import make_sampler, next_seed


class LlamaCppMethods:
    # ------------------------------------------------------------ seeds

    def set_seed(self, seed: int) -> None:
        """The seed of the next sampling call that gives none (then chained on)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ParameterTypeError(f"seed must be an int, got {seed!r}")
        if not -1 <= seed < 2**64:
            raise ParameterError(f"seed must be in [-1, 2**64), got {seed}")
        self._seed = int(seed) & 0xFFFFFFFF

    def _next_seed(self) -> int:
        """llama-cpp-python's chain: a call without a seed samples with one drawn
        from the current seed, which becomes the current seed."""
        self._seed = next_seed(self._seed)
        return self._seed

    # ------------------------------------------------------------ sampling

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
            seed = self._next_seed()
        else:
            self.set_seed(seed)
        return make_sampler(self.tokenizer, self.n_vocab(), seed, temperature=temperature,
                            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                            repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                            frequency_penalty=frequency_penalty, logit_bias=logit_bias,
                            grammar=grammar, mirostat_mode=mirostat_mode,
                            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                            logits_processor=logits_processor)


    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
               typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0,
               frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
               tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_eta: float = 0.1,
               mirostat_tau: float = 5.0, penalize_nl: bool = True, logits_processor=None,
               grammar=None, idx: int | None = None) -> int:
        """One token sampled from the logits after position idx (default: the last)."""
        n = self.n_tokens
        if n == 0:
            raise ParameterError("sample needs evaluated tokens: call eval first")
        if idx is None or idx == n - 1:
            logits = self.scores[-1]
        elif not (0 <= idx < n):
            raise ParameterError(f"idx={idx} is outside the {n} evaluated tokens")
        elif not self.config.logits_all:
            raise ParameterError(f"idx={idx}: only the last token's logits are kept; create "
                                 "the Llama with logits_all=True to sample at other positions")
        else:
            logits = self.scores[idx]
        sampler = self.sampler(temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p,
                               typical_p=typical_p, repeat_penalty=repeat_penalty,
                               presence_penalty=presence_penalty,
                               frequency_penalty=frequency_penalty, grammar=grammar,
                               mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                               mirostat_eta=mirostat_eta, logits_processor=logits_processor)
        history = self.input_ids[:n if idx is None else idx + 1]
        return int(sampler.sample(np.array(logits, np.float32), history))

    @staticmethod
    def logits_to_logprobs(logits, axis: int = -1) -> np.ndarray:
        """log_softmax of logits along axis (float32); -inf rows stay -inf."""
        x = np.asarray(logits, np.float32)
        m = np.amax(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        shifted = (x - m).astype(np.float32)
        with np.errstate(divide="ignore"):
            return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        """How many leading tokens a and b share."""
        return common_prefix(a, b)

    # ------------------------------------------------------------ views

    def token_bos(self) -> int:
        return -1 if self.tokenizer.bos_id is None else self.tokenizer.bos_id

    def token_eos(self) -> int:
        return -1 if self.tokenizer.eos_id is None else self.tokenizer.eos_id

    def token_nl(self) -> int:
        """The id of the newline token."""
        return self.tokenizer.encode("\n", add_bos=False)[-1]


    @property
    def eval_tokens(self) -> deque:
        return deque(self.input_ids.tolist(), maxlen=self.n_ctx())

    @property
    def eval_logits(self) -> deque:
        return deque(self.scores.tolist(), maxlen=self.n_ctx() if self.config.logits_all else 1)

    @property
    def n_batch(self) -> int:
        return self.config.n_batch

    @property
    def n_threads(self) -> int | None:
        return self.config.n_threads

    # ------------------------------------------------------------ OpenAI's types

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any):
        """create_chat_completion's result as the openai package's ChatCompletion
        (or, streamed, ChatCompletionChunk objects)."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError as e:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: "
                              "pip install openai") from e
        if kwargs.get("stream", False):
            return (ChatCompletionChunk(**c) for c in self.create_chat_completion(*args, **kwargs))
        return ChatCompletion(**self.create_chat_completion(*args, **kwargs))

    # ------------------------------------------------------------ pickling

    def __getstate__(self) -> dict:
        return dict(self._init_kwargs)

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
