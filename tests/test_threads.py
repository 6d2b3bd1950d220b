"""One Llama shared by threads: calls serialised, streams exclusive, close()
waiting for a decode in progress, ClosedError afterwards. Crash-prone cases
run in a subprocess, so a segfault fails the test instead of killing pytest."""
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from fixtures.tiny_models import write_tiny_model

from pyllamakv import errors

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("thr") / "tiny.gguf", seed=9,
                                n_vocab=320, n_layer=3, vocab=True))


def _subprocess(code: str, timeout: float = 300) -> str:
    import os
    env = dict(os.environ)
    # the source tree only with a built library (development; conftest.py's rule):
    # otherwise its pyllamakv, which has no core, would shadow the installed one
    src = [str(ROOT)] if os.environ.get("PYLLAMAKV_LIBRARY") else []
    env["PYTHONPATH"] = os.pathsep.join(src + [str(TESTS), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=timeout, env=env, cwd=str(TESTS))
    assert out.returncode == 0, f"rc={out.returncode}\n{out.stdout}\n{out.stderr[-3000:]}"
    return out.stdout


def test_two_threads_sharing_one_llama_give_the_sequential_texts(tiny):
    out = _subprocess(f"""
        import threading, numpy as np
        from pyllamakv import Llama
        llm = Llama({tiny!r}, n_ctx=512, n_batch=64, n_threads=1, seed=1)
        rng = np.random.default_rng(0)
        prompts = [[int(t) for t in rng.integers(3, 320, int(rng.integers(20, 120)))]
                   for _ in range(6)]
        def run(p, stream):
            if stream:
                return "".join(c["choices"][0]["text"]
                               for c in llm(p, max_tokens=24, temperature=0, stream=True))
            return llm(p, max_tokens=24, temperature=0)["choices"][0]["text"]
        want = [run(p, False) for p in prompts]
        got = {{}}
        def worker(k):
            for rep in range(3):
                for i in range(k, len(prompts), 2):
                    got.setdefault(i, set()).add(run(prompts[i], (i + rep) % 2 == 1))
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
        for t in ts: t.start()
        for t in ts: t.join()
        assert all(got[i] == {{want[i]}} for i in range(len(prompts))), (got, want)
        print("ok")
    """)
    assert out.strip() == "ok"


def test_close_from_another_thread_mid_decode(tiny):
    """Llama.close, Model.close and Context.close while another thread decodes:
    no crash; the decoding thread finishes its step or gets ClosedError."""
    out = _subprocess(f"""
        import threading, time, numpy as np
        from pyllamakv import Llama, errors
        from pyllamakv.core import native as _native
        rng = np.random.default_rng(1)
        toks = [int(t) for t in rng.integers(3, 320, 1000)]
        outcomes = []
        def busy(fn):
            try:
                while True:
                    fn()
            except errors.ClosedError:
                outcomes.append("closed")
            except Exception as e:
                outcomes.append(repr(e))
        for i in range(12):
            which = i % 3
            if which == 0:
                llm = Llama({tiny!r}, n_ctx=1024, n_batch=512, n_threads=1)
                fn = lambda: (llm.reset(), llm.eval(toks))
                close = llm.close
            else:
                m = _native.Model({tiny!r})
                c = _native.Context(m, n_ctx=1024, n_batch=512, n_threads=1)
                fn = lambda: (c.truncate(0), c.decode(toks[:500]), c.decode(toks[500:]))
                close = m.close if which == 1 else c.close
            t = threading.Thread(target=busy, args=(fn,))
            t.start()
            time.sleep(rng.uniform(0.0, 0.3))
            close()
            t.join(60)
            assert not t.is_alive()
        assert outcomes == ["closed"] * 12, outcomes
        print("ok")
    """)
    assert out.strip() == "ok"


def test_a_stream_holds_the_llama_until_it_ends(tiny):
    from pyllamakv import Llama
    rng = np.random.default_rng(2)
    p1 = [int(t) for t in rng.integers(3, 320, 40)]
    p2 = [int(t) for t in rng.integers(3, 320, 50)]
    with Llama(tiny, n_ctx=256, n_threads=1) as llm:
        want1 = llm(p1, max_tokens=12, temperature=0)["choices"][0]["text"]
        want2 = llm(p2, max_tokens=12, temperature=0)["choices"][0]["text"]
        stream = llm(p1, max_tokens=12, temperature=0, stream=True)
        first = next(stream)["choices"][0]["text"]
        other = {}
        t = threading.Thread(target=lambda: other.setdefault(
            "text", llm(p2, max_tokens=12, temperature=0)["choices"][0]["text"]))
        t.start()
        t.join(0.5)
        assert t.is_alive()              # waiting for the stream
        assert llm.n_tokens > len(p1) - 1  # the opening thread may still call
        rest = "".join(c["choices"][0]["text"] for c in stream)
        t.join(60)
        assert first + rest == want1 and other["text"] == want2
        gen = llm.generate([5, 6, 7], temp=0)   # an abandoned stream releases the Llama
        next(gen)
        del gen                          # collected: the reservation goes with it
        done = []
        t = threading.Thread(target=lambda: done.append(llm(
            [8, 9], max_tokens=2, temperature=0)))
        t.start()
        t.join(60)
        assert done


def test_every_call_after_close_raises_closed(tiny):
    from pyllamakv import Llama
    llm = Llama(tiny, n_ctx=128, n_threads=1)
    stream = llm([5, 6, 7], max_tokens=8, temperature=0, stream=True)
    next(stream)
    llm.close()
    llm.close()                          # idempotent
    calls = [lambda: llm([5, 6], max_tokens=2), lambda: llm.eval([5]), lambda: llm.reset(),
             lambda: llm.tokenize(b"x"), lambda: llm.detokenize([5]), lambda: llm.n_tokens,
             lambda: llm.scores, lambda: llm.input_ids, lambda: llm.save_state(),
             lambda: llm.kv_stats(), lambda: llm.n_vocab(), lambda: next(stream),
             lambda: llm.generate([5]), lambda: llm.create_chat_completion(
                 [{"role": "user", "content": "hi"}])]
    for call in calls:
        with pytest.raises(errors.ClosedError, match="closed"):
            call()


def test_closed_native_handles_raise_closed(tiny):
    from pyllamakv.core import native as _native
    m = _native.Model(tiny)
    c = _native.Context(m, n_ctx=16, n_threads=1)
    c.close()
    for call in (lambda: c.decode([1]), lambda: c.logits(), lambda: c.n_tokens,
                 lambda: c.state_get(), lambda: c.truncate(0), lambda: c.kv_stats()):
        with pytest.raises(errors.ClosedError, match="context is closed"):
            call()
    m.close()
    with pytest.raises(errors.ClosedError, match="model is closed"):
        _native.Context(m, n_ctx=16)
