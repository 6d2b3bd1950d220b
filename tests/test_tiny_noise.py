"""The noise floor of benchmarks/tiny_noise.py (tests/fixtures/noise.py) on the
CPU: the offsets are the f32 elements of the blocks' norm weights, a toggle
moves each by one ulp and a second puts the file back, and a draw that toggles
them all moves the logits of a case whose 8-bit codes sit near their steps
while the unchanged file scores 0."""
from __future__ import annotations

import hashlib

import numpy as np
from gguf import GGUFReader

from fixtures import gpu_cases
from fixtures import noise as tn


def _case(tmp_path, arch="qwen3", wtype="q4_1"):
    return gpu_cases.tiny_case(tmp_path, arch, wtype)


def test_offsets_are_norm_weights_and_toggles_undo(tmp_path):
    path, _, _ = _case(tmp_path)
    offs = tn.norm_offsets(path)
    norms = [t for t in GGUFReader(str(path)).tensors
             if t.name.startswith("blk.") and t.name.endswith("norm.weight")]
    assert offs.size == sum(int(t.n_elements) for t in norms) > 0
    before = path.read_bytes()
    raw = np.frombuffer(before, np.uint8)
    rng = np.random.default_rng()
    picks = rng.choice(offs, 16, replace=False)
    vals = np.array([raw[o:o + 4].view(np.float32)[0] for o in picks])
    tn.toggle_last_bit(path, picks)
    after = np.frombuffer(path.read_bytes(), np.uint8)
    moved = np.array([after[o:o + 4].view(np.float32)[0] for o in picks])
    assert np.all(moved != vals)
    assert np.all(np.abs(moved - vals) <= np.spacing(np.abs(vals)) * 1.0001)
    tn.toggle_last_bit(path, picks)
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(before).digest()


def test_floor_moves_and_the_file_is_restored(tmp_path):
    path, toks, kv = _case(tmp_path)
    before = path.read_bytes()
    base, kls = tn.case_floor(path, toks, kv, draws=2, fraction=1.0, rng=np.random.default_rng(1))
    assert path.read_bytes() == before
    assert np.all(np.isfinite(base)) and base.shape == (len(toks), 320)
    # every norm weight toggled: the same change twice, and it moves this case
    assert kls[0] == kls[1] > 0
    again = gpu_cases.engine_logits(path, toks, kv, kv, "cpu")
    assert np.array_equal(again, base)
