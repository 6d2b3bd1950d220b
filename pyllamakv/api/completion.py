"""The completion loop: prompt tokens -> pieces of text, stop strings, logprobs.

``completion_pieces`` drives a token stream of one Sequence (api/decoding.py;
``Llama.token_stream`` for a Llama's own) and decides when to stop: an
end-of-generation token or a chat template's stop token ("stop"), a stop
string ("stop"; the text is cut before it), max_tokens or a full context
("length"). Streamed text is decoded incrementally, so a UTF-8 character
split across tokens comes out whole, and a tail that may begin a stop string
is held back until it is known not to.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Sequence

import numpy as np

from ..errors import ContextFullError, ParameterError
from .response import Piece, Usage
from ..engine.processors import stop_asked
from ..engine.sampling import Sampler, log_softmax, top_logprobs
from ..text.tokenizer import Tokenizer
from ..text.llama_tokenizer import incremental_decoder

if TYPE_CHECKING:
    from ..engine.guard import Guard
    from ..engine.sequence import Sequence as Seq

# stream(prompt, sampler, limit=None, ends=None) -> the sampled ids (api/decoding.py)
TokenStream = Callable[..., Iterator[int]]


class StopScanner:
    """Cuts text at the first stop string; holds back a tail that may start one."""

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was hit)."""
        buf = self._pending + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self._pending = ""
            return buf[:min(hits)], True
        keep = 0
        for s in self.stops:   # longest tail of buf that is a proper prefix of a stop
            for n in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:n]):
                    keep = n
                    break
        self._pending = buf[len(buf) - keep:]
        return buf[:len(buf) - keep], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out


class LogprobTracker:
    """llama-cpp-python's logprobs lists (tokens, text_offset, token_logprobs,
    top_logprobs) for the tokens of a completion; inert when n is None. With ids
    also token_ids and top_ids ({id: logprob} per token, the ids the text keys
    of top_logprobs lose: llama-server's n_probs answer, server/native.py)."""

    def __init__(self, tokenizer: Tokenizer, n: int | None, ids: bool = False) -> None:
        self.tokenizer, self.n, self.offset, self.ids = tokenizer, n, 0, ids

    def _text(self, token: int) -> str:
        return self.tokenizer.decode([token]).decode("utf-8", "ignore")

    def _lists(self, entries) -> dict:
        out = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        if self.ids:
            out.update(token_ids=[], top_ids=[])
        for token, raw_len, logits in entries:
            out["tokens"].append(self._text(token))
            out["text_offset"].append(self.offset)
            self.offset += raw_len
            if self.ids:
                out["token_ids"].append(int(token))
            if logits is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                if self.ids:
                    out["top_ids"].append(None)
                continue
            logp = log_softmax(logits)
            best = top_logprobs(logits, self.n)
            top = {self._text(i): lp for i, lp in best}
            top[self._text(token)] = float(logp[token])
            out["token_logprobs"].append(float(logp[token]))
            out["top_logprobs"].append(top)
            if self.ids:
                out["top_ids"].append({int(i): lp for i, lp in best})
        return out

    def start_after(self, prompt: Sequence[int]) -> None:
        """Offsets start after the prompt's text (what echo would have put first)."""
        if self.n is not None:
            self.offset = sum(len(self._text(t)) for t in prompt)

    def prompt(self, tokens: Sequence[int], rows: np.ndarray) -> dict | None:
        """Prompt tokens' logprobs; rows[i] are the logits after prompt token i."""
        if self.n is None:
            return None
        return self._lists((t, len(self._text(t)), rows[i - 1] if i else None)
                           for i, t in enumerate(tokens))

    def token(self, token: int, raw: str, logits: np.ndarray) -> dict | None:
        return None if self.n is None else self._lists([(token, len(raw), logits)])


def completion_pieces(seq: "Seq", tokenizer: Tokenizer, stream: TokenStream, prompt: list[int],
                      usage: Usage, max_tokens: int | None, stop: str | Sequence[str] | None,
                      echo: bool, logprobs: int | None, sampler: Sampler,
                      stop_ids: Sequence[int] = (), stopping_criteria=None, *,
                      logits_all: bool = False, drafting: bool = False,
                      sampled_logprobs: bool = False, logprob_ids: bool = False,
                      on_end: Callable[[], None] | None = None) -> Iterator[Piece]:
    """Pieces of a completion of prompt on sequence seq, whose sampled ids
    stream gives; the last piece has the finish_reason.
    stopping_criteria: llama-cpp-python's f(input_ids, logits) -> bool (or a list
    of them), asked for each sampled token before it is emitted, with the ids and
    logits it was sampled after; True ends the completion ("stop") without it.
    logprobs need logits_all (seq keeps every row), or sampled_logprobs (a
    door that opts in: the sampled tokens' from the last logits) without echo
    or drafting; logprob_ids adds their ids. on_end: called once the whole
    completion was read (a prompt cache keeps where it ended)."""
    n_ctx = seq.n_ctx
    if len(prompt) == 0:
        raise ParameterError("the prompt is empty")
    if len(prompt) >= n_ctx:
        raise ContextFullError(f"Requested tokens ({len(prompt)}) exceed context window of {n_ctx}")
    if logprobs is not None and not logits_all and (echo or drafting or not sampled_logprobs):
        # llama-cpp-python's rule; an engine that opts in (the server's slots) gives the
        # sampled tokens' logprobs from the last logits, which is all they need
        raise ParameterError("logprobs needs a Llama created with logits_all=True")
    room = n_ctx - len(prompt)
    max_tokens = room if max_tokens is None or max_tokens <= 0 else min(max_tokens, room)
    usage.prompt_tokens, usage.completion_tokens = len(prompt), 0
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    scanner, decoder = StopScanner(stops), incremental_decoder(tokenizer)
    ends = set(tokenizer.eog_ids) | set(stop_ids)
    lp = LogprobTracker(tokenizer, logprobs, logprob_ids)
    if not echo:     # offsets count from the prompt's start, as llama-cpp-python's
        lp.start_after(prompt)

    greedy_ahead = logprobs is None and stopping_criteria is None   # nothing reads the logits
    tokens = (stream(prompt, sampler, limit=max_tokens, ends=sorted(ends))
              if greedy_ahead else stream(prompt, sampler))
    first = next(tokens, None)   # prefill, then the first sample (None: cancelled)
    if echo:
        text = incremental_decoder(tokenizer).feed(prompt)
        yield Piece(text, lp.prompt(prompt, seq.scores()))
    reason, hit, token = "length", False, first
    while True:
        if token is None or token in ends or (stopping_criteria is not None
                             and stop_asked(stopping_criteria, seq)):
            reason = "stop"
            break
        usage.completion_tokens += 1
        raw = decoder.feed(token)
        text, hit = scanner.feed(raw)
        # (the logits it was sampled from; read only when asked: a prompt list's
        # sequence has its token's decode queued, which a read would run alone)
        yield Piece(text, lp.token(token, raw, seq.last_logits()) if logprobs
                    is not None else None)
        if hit:
            reason = "stop"
            break
        if usage.completion_tokens >= max_tokens:
            break
        token = next(tokens, None)
    tokens.close()
    tail = ""
    if not hit:   # release what was held back: no stop string came
        tail, hit = scanner.feed(decoder.flush())
        tail += "" if hit else scanner.flush()
        reason = "stop" if hit else reason
    yield Piece(tail, None, reason)
    if on_end is not None:          # the whole completion was read
        on_end()


def _started(make_pieces: Callable[[], Iterator[Piece]]) -> Iterator[Piece]:
    """make_pieces()'s pieces, its checks and prefill run now (up to the first piece)."""
    pieces = make_pieces()
    return itertools.chain([next(pieces)], pieces)


def shape_pieces(make_pieces: Callable[[], Iterator[Piece]], stream: bool,
                 shape_stream: Callable, shape_full: Callable):
    """The answer of a door that owns its sequence (a server slot): the checks and
    the prefill now; then the chunks (stream) or the whole dict."""
    pieces = _started(make_pieces)
    return shape_stream(pieces) if stream else shape_full(pieces)


def run_pieces(guard: "Guard", make_pieces: Callable[[], Iterator[Piece]], stream: bool,
               shape_stream: Callable, shape_full: Callable):
    """Non-streamed: every piece under guard (a Llama's lock, guard.py). Streamed:
    the checks and the prefill now, then a stream that holds the guard until it ends."""
    if stream:
        return guard.stream(lambda: shape_stream(_started(make_pieces)))
    return guard.call(lambda: shape_full(_started(make_pieces)))
