"""qwen35 against Hugging Face transformers' own Qwen3.5 implementation: the
same random tiny weights as an HF state dict (loaded into
Qwen3_5ForCausalLM) and as a GGUF written the way llama.cpp's converter
writes one (tiny_qwen35.py); the logits must agree. Skips without torch and
a transformers that has Qwen3.5 (5.x)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
qwen3_5 = pytest.importorskip("transformers.models.qwen3_5")

from pyllamakv.core.native import Context, Model  # noqa: E402
from fixtures.tiny_qwen35 import Qwen35Config, gguf_tensors, hf_weights, write_gguf  # noqa: E402


def _hf_model(cfg: Qwen35Config, weights: dict[str, np.ndarray]):
    conf = qwen3_5.Qwen3_5TextConfig(
        vocab_size=cfg.n_vocab, hidden_size=cfg.n_embd, intermediate_size=cfg.n_ff,
        num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_head_kv, head_dim=cfg.head_dim,
        linear_conv_kernel_dim=cfg.conv, linear_key_head_dim=cfg.dk,
        linear_value_head_dim=cfg.dv, linear_num_key_heads=cfg.nk,
        linear_num_value_heads=cfg.nv, rms_norm_eps=cfg.eps, tie_word_embeddings=False,
        layer_types=["full_attention" if cfg.is_attention(i) else "linear_attention"
                     for i in range(cfg.n_layer)],
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base,
                         "partial_rotary_factor": cfg.rope_dim / cfg.head_dim})
    model = qwen3_5.Qwen3_5ForCausalLM(conf).eval().float()
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not [k for k in missing if "rotary" not in k], (missing, unexpected)
    return model


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("shape", [dict(), dict(nk=2, nv=2, interval=2, n_layer=6)],
                         ids=["tiled-v-heads", "equal-heads"])
def test_logits_agree_with_transformers(tmp_path, shape):
    cfg = Qwen35Config(**shape)
    rng = np.random.default_rng()
    weights = hf_weights(cfg, rng)
    path = write_gguf(tmp_path / "hf.gguf", cfg, gguf_tensors(cfg, weights))
    tokens = rng.integers(0, cfg.n_vocab, 150).tolist()   # crosses the delta-rule chunks of 64
    with torch.no_grad():
        want = _hf_model(cfg, weights)(torch.tensor([tokens])).logits[0].double().numpy()
    with Model(path) as m:
        c = Context(m, n_ctx=256, n_batch=256, n_ubatch=64, logits_all=True, type_k="f32",
                    type_v="f32", n_threads=2)
        c.decode(tokens)
        got = c.logits().astype(np.float64)
    diff = np.abs(got - want).max()
    p, q = _softmax(want), _softmax(got)
    kl = float(np.max(np.sum(p * (np.log(p) - np.log(q)), -1)))
    print(f"qwen35 vs transformers {shape}: max |diff| {diff:.3g} "
          f"(logits up to {np.abs(want).max():.3g}), max KL {kl:.3g}")
    assert diff < 1e-3 * np.abs(want).max()
    assert kl < 1e-6
    assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.99
