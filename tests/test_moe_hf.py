"""qwen3moe and qwen35moe against Hugging Face transformers' own implementations
(Qwen3MoeForCausalLM, Qwen3_5MoeForCausalLM): the same random tiny weights as an
HF state dict and as a GGUF written the way llama.cpp's converter writes one
(tiny_moe.py); the logits must agree. Quantized files are compared with HF
holding the file's own weights, dequantized. Skips without torch or a
transformers that has these classes (5.x)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
qwen3_moe = pytest.importorskip("transformers.models.qwen3_moe")
qwen3_5_moe = pytest.importorskip("transformers.models.qwen3_5_moe")

from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import quants  # noqa: E402

from pyllamakv.core.native import Context, Model  # noqa: E402
from fixtures.tiny_moe import (Qwen3MoeConfig, Qwen35MoeConfig, qwen3moe_gguf_tensors,  # noqa: E402
                      qwen3moe_hf_weights, qwen35moe_gguf_tensors, qwen35moe_hf_weights,
                      write_qwen3moe, write_qwen35moe)


def _load(model, weights):
    state = {k: torch.from_numpy(v) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not [k for k in missing if "rotary" not in k], (missing, unexpected)
    return model.eval().float()


def _hf_qwen3moe(cfg: Qwen3MoeConfig, weights):
    conf = qwen3_moe.Qwen3MoeConfig(
        vocab_size=cfg.n_vocab, hidden_size=cfg.n_embd, intermediate_size=cfg.n_ff,
        num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
        num_key_value_heads=cfg.n_head_kv, head_dim=cfg.head_dim, num_experts=cfg.n_expert,
        num_experts_per_tok=cfg.n_used, moe_intermediate_size=cfg.n_ff_exp,
        norm_topk_prob=cfg.norm is not False, decoder_sparse_step=1, mlp_only_layers=[],
        rms_norm_eps=cfg.eps, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base})
    return _load(qwen3_moe.Qwen3MoeForCausalLM(conf), weights)


def _hf_qwen35moe(cfg: Qwen35MoeConfig, weights):
    conf = qwen3_5_moe.Qwen3_5MoeTextConfig(
        vocab_size=cfg.n_vocab, hidden_size=cfg.n_embd, num_hidden_layers=cfg.n_layer,
        num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head_kv,
        head_dim=cfg.head_dim, linear_conv_kernel_dim=cfg.conv, linear_key_head_dim=cfg.dk,
        linear_value_head_dim=cfg.dv, linear_num_key_heads=cfg.nk, linear_num_value_heads=cfg.nv,
        num_experts=cfg.n_expert, num_experts_per_tok=cfg.n_used,
        moe_intermediate_size=cfg.n_ff_exp, shared_expert_intermediate_size=cfg.n_ff_shexp,
        rms_norm_eps=cfg.eps, tie_word_embeddings=False,
        layer_types=["full_attention" if cfg.is_attention(i) else "linear_attention"
                     for i in range(cfg.n_layer)],
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base,
                         "partial_rotary_factor": cfg.rope_dim / cfg.head_dim})
    return _load(qwen3_5_moe.Qwen3_5MoeForCausalLM(conf), weights)


def _as_stored(weights: dict, wtype: T, experts_only: bool) -> dict:
    """The weights as a file of wtype holds them: matrices (with experts_only the
    experts' only) quantized and back; the router, the shared expert's gate, vectors
    and conv taps stay f32, as tiny_moe writes them."""
    def stored(k, v):
        expert = "mlp.experts." in k or "mlp.shared_expert." in k
        if wtype == T.F32 or v.ndim == 1 or "conv1d" in k or (experts_only and not expert) \
                or "mlp.gate.weight" in k or "shared_expert_gate" in k:
            return v
        return quants.dequantize(quants.quantize(v, wtype), wtype).astype(np.float32)
    return {k: stored(k, v) for k, v in weights.items()}


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _compare(name, path, want, tokens, limits):
    """limits: (mean KL, median KL, top-1 agreement); f32 also holds the logits to 1e-3 of
    their range"""
    with Model(path) as m:
        c = Context(m, n_ctx=256, n_batch=256, n_ubatch=64, logits_all=True, type_k="f32",
                    type_v="f32", n_threads=2)
        c.decode(tokens)
        got = c.logits().astype(np.float64)
    p, q = _softmax(want), _softmax(got)
    kl = np.sum(p * (np.log(p) - np.log(q)), -1)
    diff = np.abs(got - want).max()
    top2 = np.sort(want, -1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.25   # positions where HF's top token clearly leads
    top1 = (got.argmax(-1) == want.argmax(-1))[clear].mean()
    print(f"{name}: max |diff| {diff:.3g} (logits up to {np.abs(want).max():.3g}), "
          f"KL max {kl.max():.3g} mean {kl.mean():.3g} median {np.median(kl):.3g}, "
          f"top-1 {top1:.4f} (of {clear.sum()} clear)")
    mean_kl, median_kl, min_top1 = limits
    if limits == LIMITS["f32"]:
        assert diff < 1e-3 * np.abs(want).max()
    assert kl.mean() < mean_kl and np.median(kl) < median_kl
    assert top1 > min_top1


# (wtype, experts_only): f32; the experts alone quantized (only their matmuls see 8-bit
# activations: close); the whole file quantized (every matmul: looser, as dense models)
CASES = [(T.F32, False), (T.Q8_0, True), (T.Q4_0, True), (T.F16, True), (T.Q8_0, False)]
IDS = ["f32", "q8_0-experts", "q4_0-experts", "f16-experts", "q8_0-all"]
# (mean KL, median KL, top-1 where HF's top token leads by > 0.25); measured over 7 runs:
# experts median <= 1.5e-4, all median <= 6.5e-4, top-1 >= 0.94 (8-bit activations; the
# dense qwen35 at q8_0 against HF is as far off; the random hybrid amplifies them)
LIMITS = {"f32": (1e-6, 1e-9, 0.99), "experts": (2e-2, 5e-4, 0.9), "all": (5e-2, 3e-3, 0.85)}


def _limits(wtype, experts_only):
    return LIMITS["f32" if wtype == T.F32 else "experts" if experts_only else "all"]


@pytest.mark.parametrize("wtype,experts_only", CASES, ids=IDS)
@pytest.mark.parametrize("norm,fused", [(None, False), (False, False), (None, True)],
                         ids=["renorm", "no-renorm", "fused-gate-up"])
def test_qwen3moe_logits_agree_with_transformers(tmp_path, wtype, experts_only, norm, fused):
    if (norm is False or fused) and wtype not in (T.F32, T.Q4_0):
        pytest.skip("the no-renorm router and the fused gate_up are checked in f32 and q4_0")
    cfg = Qwen3MoeConfig(norm=norm, fused=fused)
    rng = np.random.default_rng()
    weights = _as_stored(qwen3moe_hf_weights(cfg, rng), wtype, experts_only)
    path = write_qwen3moe(tmp_path / "m.gguf", cfg, qwen3moe_gguf_tensors(cfg, weights), wtype,
                          experts_only)
    tokens = rng.integers(0, cfg.n_vocab, 150).tolist()
    with torch.no_grad():
        want = _hf_qwen3moe(cfg, weights)(torch.tensor([tokens])).logits[0].double().numpy()
    _compare(f"qwen3moe {wtype.name} experts_only={experts_only} norm={norm} fused={fused}",
             path, want,
             tokens, _limits(wtype, experts_only))


@pytest.mark.parametrize("wtype,experts_only", CASES, ids=IDS)
@pytest.mark.parametrize("fused", [False, True], ids=["", "fused-gate-up"])
def test_qwen35moe_logits_agree_with_transformers(tmp_path, wtype, experts_only, fused):
    if fused and wtype != T.F32:
        pytest.skip("the fused gate_up is checked in f32")
    cfg = Qwen35MoeConfig(fused=fused)
    rng = np.random.default_rng()
    weights = _as_stored(qwen35moe_hf_weights(cfg, rng), wtype, experts_only)
    path = write_qwen35moe(tmp_path / "m.gguf", cfg, qwen35moe_gguf_tensors(cfg, weights), wtype,
                           experts_only)
    tokens = rng.integers(0, cfg.n_vocab, 150).tolist()   # crosses the delta-rule chunks of 64
    with torch.no_grad():
        want = _hf_qwen35moe(cfg, weights)(torch.tensor([tokens])).logits[0].double().numpy()
    _compare(f"qwen35moe {wtype.name} experts_only={experts_only} fused={fused}", path, want,
             tokens,
             _limits(wtype, experts_only))
