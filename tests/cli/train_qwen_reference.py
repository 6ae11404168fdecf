#!/usr/bin/python3
"""Reference for tests/cli/train_qwen_test.cc: Qwen2.5 / Qwen3 directories in their real layout
and three AdamW steps in plain PyTorch (float64) on the same weights.

  write FAMILY DIR SEQ   FAMILY qwen2.5 or qwen3. Writes DIR/config.json with the field set of
                         the published Qwen/Qwen2.5-0.5B (Qwen/Qwen3-0.6B) config.json at small
                         sizes, DIR/model.safetensors (BF16, random, seeded; biases and q/k norm
                         weights random too), DIR/generation_config.json, and DIR/tokens.bin:
                         SEQ raw uint16 ids (one training window: every sample is that window).
  check DIR EXPORTED MICRO STEPS CONFIG
                         Runs STEPS steps of torch.optim.AdamW (lr, betas, eps, weight_decay of
                         the DeepSpeed CONFIG) with torch.nn.utils.clip_grad_norm_ at its
                         gradient_clipping, on MICRO copies of the window (Hugging Face labels =
                         inputs), and prints JSON: the loss of each step, the loss after the last
                         step, and for the weights in EXPORTED (model.safetensors) the worst
                         max|exported - torch| / max|torch| over the tensors.

The model is tests/models/torch_llama_reference.py's (Llama with Qwen's biases and q/k norms),
written from transformers' modeling_qwen2 / modeling_qwen3, never the C++ code.
Run with Debian's interpreter: /usr/bin/python3.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import torch_llama_reference as ref  # noqa: E402

# Small sizes; every other field as the published config.json has it.
QWEN25 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 96, "max_position_embeddings": 128,
    "max_window_layers": 2, "model_type": "qwen2", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 128, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 320,
}
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 32, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 96,
    "max_position_embeddings": 128, "max_window_layers": 2, "model_type": "qwen3",
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": 320,
}


def tensor_shapes(cfg):
    h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // heads
    inter, v = cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {"model.embed_tokens.weight": [v, h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = [heads * hd, h]
        shapes[p + "self_attn.k_proj.weight"] = [kv * hd, h]
        shapes[p + "self_attn.v_proj.weight"] = [kv * hd, h]
        shapes[p + "self_attn.o_proj.weight"] = [h, heads * hd]
        if cfg["model_type"] == "qwen2":
            shapes[p + "self_attn.q_proj.bias"] = [heads * hd]
            shapes[p + "self_attn.k_proj.bias"] = [kv * hd]
            shapes[p + "self_attn.v_proj.bias"] = [kv * hd]
        else:
            shapes[p + "self_attn.q_norm.weight"] = [hd]
            shapes[p + "self_attn.k_norm.weight"] = [hd]
        shapes[p + "mlp.gate_proj.weight"] = [inter, h]
        shapes[p + "mlp.up_proj.weight"] = [inter, h]
        shapes[p + "mlp.down_proj.weight"] = [h, inter]
        shapes[p + "input_layernorm.weight"] = [h]
        shapes[p + "post_attention_layernorm.weight"] = [h]
    shapes["model.norm.weight"] = [h]
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [v, h]
    return shapes


def to_bf16_bits(a):
    """float32 array -> uint16 bf16 bits, round to nearest even."""
    u = a.astype("<f4").view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def write(family, out_dir, seq):
    cfg = QWEN25 if family == "qwen2.5" else QWEN3
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": cfg["eos_token_id"]}, f)
    rng = np.random.default_rng(20250 + len(family))
    header, blobs, offset = {}, [], 0
    for name, shape in tensor_shapes(cfg).items():
        if name.endswith("norm.weight"):
            a = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.3 * rng.standard_normal(shape)
        else:
            a = 0.1 * rng.standard_normal(shape)
        b = to_bf16_bits(a.astype(np.float32)).tobytes()
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    ids = rng.integers(0, cfg["vocab_size"], size=seq).astype("<u2")
    ids.tofile(os.path.join(out_dir, "tokens.bin"))


def check(model_dir, exported_dir, micro, steps, config_path):
    torch.set_num_threads(2)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(config_path) as f:
        ds = json.load(f)
    opt_cfg = ds["optimizer"]["params"]
    params = {n: t.clone().requires_grad_(True)
              for n, t in ref.read_checkpoint(model_dir).items()}
    window = np.fromfile(os.path.join(model_dir, "tokens.bin"), dtype="<u2").astype(np.int64)
    ids = torch.from_numpy(np.stack([window] * micro))
    opt = torch.optim.AdamW(list(params.values()), lr=opt_cfg["lr"],
                            betas=tuple(opt_cfg.get("betas", (0.9, 0.999))),
                            eps=opt_cfg.get("eps", 1e-8),
                            weight_decay=opt_cfg.get("weight_decay", 0.01))

    def loss_of():
        logits = ref.llama_forward(cfg, params, ids)
        v = logits.shape[-1]
        return torch.nn.functional.cross_entropy(
            logits[:, :-1, :].reshape(-1, v), ids[:, 1:].reshape(-1), ignore_index=-100)

    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(params.values()),
                                                          ds["gradient_clipping"])))
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        final = loss_of().item()
    exported = ref.read_checkpoint(exported_dir)
    worst, worst_name = 0.0, ""
    missing = sorted(set(params) ^ set(exported))
    for name, t in params.items():
        if name not in exported:
            continue
        e = exported[name]
        err = (e - t.detach()).abs().max().item() / t.detach().abs().max().item()
        if err > worst:
            worst, worst_name = err, name
    print(json.dumps({"losses": losses, "grad_norms": norms, "final_loss": final,
                      "weight_rel_err": worst, "worst_tensor": worst_name,
                      "name_mismatch": missing, "tensors": len(exported)}))


def main(argv):
    if len(argv) >= 2 and argv[1] == "write" and len(argv) == 5:
        write(argv[2], argv[3], int(argv[4]))
    elif len(argv) >= 2 and argv[1] == "check" and len(argv) == 7:
        check(argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
