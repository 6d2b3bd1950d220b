"""gemma3 against Hugging Face transformers' own Gemma 3 implementation: the
same random tiny weights as an HF state dict (loaded into Gemma3ForCausalLM)
and as a GGUF written the way llama.cpp's converter writes one
(tiny_gemma3.py); over prompts several sliding windows long the logits must
agree. Skips without torch and transformers."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
gemma3 = pytest.importorskip("transformers.models.gemma3")

from pyllamakv.core.native import Context, Model  # noqa: E402
from fixtures.tiny_gemma3 import Gemma3Config, gguf_tensors, hf_weights, write_gguf  # noqa: E402


def _hf_model(cfg: Gemma3Config, weights: dict[str, np.ndarray]):
    conf = gemma3.Gemma3TextConfig(
        vocab_size=cfg.n_vocab, hidden_size=cfg.n_embd, intermediate_size=cfg.n_ff,
        num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_head_kv, head_dim=cfg.head_dim,
        query_pre_attn_scalar=cfg.head_dim, sliding_window=cfg.window,
        layer_types=["sliding_attention" if cfg.is_local(i) else "full_attention"
                     for i in range(cfg.n_layer)],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": cfg.rope_base},
                         "sliding_attention": {"rope_type": "default",
                                               "rope_theta": cfg.rope_base_swa}},
        rms_norm_eps=cfg.eps, final_logit_softcapping=cfg.softcap or None,
        tie_word_embeddings=True, max_position_embeddings=4096, attn_implementation="eager")
    model = gemma3.Gemma3ForCausalLM(conf).eval().float()
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not [k for k in missing if "rotary" not in k and
                                    k != "lm_head.weight"], (missing, unexpected)
    return model


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("shape", [dict(), dict(window=40, pattern=2, n_head_kv=1, softcap=15.0)],
                         ids=["window-24", "window-40-softcap"])
def test_logits_agree_with_transformers(tmp_path, shape):
    cfg = Gemma3Config(**shape)
    rng = np.random.default_rng()
    weights = hf_weights(cfg, rng)
    path = write_gguf(tmp_path / "hf.gguf", cfg, gguf_tensors(cfg, weights))
    tokens = rng.integers(0, cfg.n_vocab, 150).tolist()   # several windows, several chunks
    with torch.no_grad():
        want = _hf_model(cfg, weights)(torch.tensor([tokens])).logits[0].double().numpy()
    with Model(path) as m:
        # micro-batches of 32 and chunks of 16: windows start inside chunks and batches
        c = Context(m, n_ctx=256, n_batch=256, n_ubatch=32, kv_chunk=16, logits_all=True,
                    type_k="f32", type_v="f32", n_threads=2)
        c.decode(tokens)
        got = c.logits().astype(np.float64)
    diff = np.abs(got - want).max()
    p, q = _softmax(want), _softmax(got)
    kl = float(np.max(np.sum(p * (np.log(p) - np.log(q)), -1)))
    print(f"gemma3 vs transformers {shape}: max |diff| {diff:.3g} "
          f"(logits up to {np.abs(want).max():.3g}), max KL {kl:.3g}")
    assert diff < 2e-3 * np.abs(want).max()
    assert kl < 1e-5
    assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.99
