"""Embeddings: the hidden states against the numpy reference; llama-cpp-python's shapes."""
import numpy as np
import pytest

from _smollm2 import require_model_path
from reference import reference_hidden
from fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("emb") / "tiny.gguf", seed=11)


@pytest.mark.parametrize("pooling", ["none", "mean", "cls", "last"])
def test_hidden_states_match_reference(tiny, pooling):
    from pyllamakv.core import native as _native
    from pyllamakv.api.embedding import POOLING, _pool
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, size=int(rng.integers(3, 40))).tolist()
    ref = reference_hidden(tiny, tokens)
    with _native.Model(str(tiny), "cpu") as m:
        ctx = _native.Context(m, n_ctx=64, n_batch=64, n_ubatch=16, logits_all=True,
                              embeddings=True)
        ctx.decode(tokens)
        got = np.array(_pool(ctx.logits(), POOLING[pooling], False))
    want = {"none": ref, "mean": ref.mean(0), "cls": ref[0], "last": ref[-1]}[pooling]
    scale = np.abs(want).max()
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 0.05 * scale


@pytest.fixture(scope="module")
def emb():
    path = require_model_path()
    from pyllamakv import Llama
    with Llama(path, n_ctx=256, embedding=True, pooling_type="mean") as m:
        yield m


def test_shapes_and_normalization(emb):
    one = emb.embed("The cat sat on the mat.", normalize=True)
    assert isinstance(one, list) and len(one) == emb.n_embd()
    assert abs(np.linalg.norm(one) - 1.0) < 1e-6
    many, n = emb.embed(["a", "b c d"], return_count=True)
    assert len(many) == 2 and n == len(emb.tokenize(b"a")) + len(emb.tokenize(b"b c d"))
    r = emb.create_embedding(["first text", "second"])
    assert r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == emb.n_embd()
               for d in r["data"])
    assert r["usage"]["prompt_tokens"] == r["usage"]["total_tokens"] > 0


def test_related_texts_are_closer(emb):
    a, b, c = (np.array(emb.embed(t, normalize=True)) for t in
               ("I love my dog.", "I adore my puppy.", "Quarterly tax filings are due."))
    assert a @ b > a @ c


def test_generation_refused_in_embedding_mode(emb):
    with pytest.raises(RuntimeError, match="embedding=True"):
        emb("Hello", max_tokens=2)
    assert len(emb.embed("still works")) == emb.n_embd()


def test_embed_needs_embedding_mode():
    path = require_model_path()
    from pyllamakv import Llama
    with Llama(path, n_ctx=64) as m:
        with pytest.raises(RuntimeError, match="embedding=True"):
            m.embed("x")
