"""A hostile or changing model file (issue 38): truncated or overwritten on
disk while loaded, NaN block scales in IQ1_M weights, NaN rows in a state blob."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyllamakv
from gguf import GGMLQuantizationType as T

from fixtures.tiny_models import write_tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def _child(code: str, tmp_path) -> subprocess.CompletedProcess:
    # the package this run imports (installed, or the tree with PYLLAMAKV_LIBRARY), not
    # necessarily the tree: a clone's own pyllamakv/ has no compiled core
    pkg_parent = os.path.dirname(os.path.dirname(pyllamakv.__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg_parent, TESTS]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)


@pytest.mark.parametrize("change", ["truncate", "overwrite"])
def test_model_file_changed_while_loaded(tmp_path, change):
    """Old code: SIGBUS at the next decode after a truncation; same-size
    overwrite changed the logits silently."""
    code = f"""
        import os, numpy as np
        from gguf import GGMLQuantizationType as T
        from fixtures.tiny_models import write_tiny_model
        from pyllamakv import Llama
        from pyllamakv.errors import ModelFileChangedError
        path = write_tiny_model("m.gguf", "llama", T.F32, vocab=True, n_vocab=320, n_embd=64,
                                n_layer=1, n_head=2, n_head_kv=1, n_ff=64, seed={random.randrange(1000)})
        llm = Llama(str(path), n_ctx=64, n_threads=1, verbose=False)
        llm.eval([1, 300, 301])
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            if "{change}" == "truncate":
                f.truncate(size // 4)
            else:
                f.seek(size // 2)
                f.write(os.urandom(size - size // 2))
        try:
            llm.reset()
            llm.eval([1, 300, 301, 302])
            print("no error")
        except ModelFileChangedError as e:
            print("refused:", e)
    """
    r = _child(code, tmp_path)
    assert r.returncode == 0, (r.returncode, r.stderr[-1500:])
    assert "refused:" in r.stdout and "changed on disk" in r.stdout, r.stdout


def test_model_file_replaced_by_rename_goes_on(tmp_path):
    from pyllamakv import Llama
    path = write_tiny_model(tmp_path / "m.gguf", "llama", T.F32, vocab=True, n_vocab=320,
                            n_embd=64, n_layer=1, n_head=2, n_head_kv=1, n_ff=64, seed=3)
    with Llama(str(path), n_ctx=64, n_threads=1, verbose=False) as llm:
        llm.eval([1, 300])
        before = np.array(llm.scores[-1])
        other = write_tiny_model(tmp_path / "o.gguf", "llama", T.F32, vocab=True, n_vocab=320,
                                 n_embd=64, n_layer=1, n_head=2, n_head_kv=1, n_ff=64, seed=4)
        os.replace(other, path)            # the map keeps the old inode: same logits
        llm.reset()
        llm.eval([1, 300])
        assert np.array_equal(np.array(llm.scores[-1]), before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_iq1_m_nan_block_scale_is_refused_at_load(tmp_path, bad):
    """Old code: IQ1_M was not checked; a NaN scale gave all-zero logits and
    greedy emitted token 0 without an error."""
    from fixtures import gguf_craft as gc
    from fixtures.tiny_models import set_block_scales
    from pyllamakv.core.native import Model
    from pyllamakv.gguf.reader import GGUFError, GGUFFile
    path = write_tiny_model(tmp_path / "m.gguf", "llama", T.IQ1_M, n_vocab=320, n_embd=256,
                            n_layer=1, n_head=2, n_head_kv=1, n_ff=256, seed=5)
    Model(GGUFFile(path)).close()                  # the good file loads
    spec = gc.read_spec(path)
    name = random.choice(["blk.0.ffn_up.weight", "token_embd.weight", "blk.0.attn_q.weight"])
    t = spec.tensor(name)
    nb = int(np.prod(t[1])) // 256
    raw = spec.tensor_bytes(name, nb * 56).reshape(nb, 56)
    k = random.randrange(nb)
    v = np.ones(1, np.float16)
    v[0] = bad
    set_block_scales(raw[k:k + 1], T.IQ1_M, v)
    spec.put_bytes(name, raw)
    bad_path = gc.write(spec, tmp_path / "bad.gguf")
    with pytest.raises(GGUFError, match=name):
        Model(GGUFFile(bad_path))


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
def test_state_with_nan_kv_rows_and_a_fresh_checksum_is_refused(tmp_path, kv_type):
    """Old code: accepted (the checksum is no secret); completions changed silently."""
    import dataclasses
    import json
    import struct
    from pyllamakv import Llama
    from pyllamakv.engine import state as st
    from pyllamakv.errors import StateError
    path = write_tiny_model(tmp_path / "m.gguf", "llama", T.Q8_0, vocab=True, seed=2)
    with Llama(str(path), n_ctx=64, n_threads=1, type_k=kv_type, type_v=kv_type) as llm:
        llm.eval([1, 40, 41, 300, 7])
        good = llm.save_state()
        blob = good.llama_state
        _, _, hlen = st._HEAD.unpack_from(blob)
        header = json.loads(blob[st._HEAD.size:st._HEAD.size + hlen])
        kv = bytearray(blob[st._HEAD.size + hlen:-32])
        _, n_tok, n_layer, tk, tv, rbk, rbv, _ = struct.unpack_from("<I4i4x3q", kv)
        side = random.choice("KV")
        layer, row = random.randrange(n_layer), random.randrange(n_tok)
        off = 48 + layer * n_tok * (rbk + rbv) + (0 if side == "K" else n_tok * rbk) + \
            row * (rbk if side == "K" else rbv)
        kv[off:off + 2] = np.array([np.nan], np.float16).tobytes()   # a value, or a block scale
        forged = st.pack(bytes(kv), model=header["model"], geometry=header["geometry"],
                         input_ids=good.input_ids, scores=good.scores)
        with pytest.raises(StateError, match=f"{side} cache rows hold NaN"):
            llm.load_state(dataclasses.replace(good, llama_state=forged))
        llm.load_state(good)                        # the genuine one still loads
