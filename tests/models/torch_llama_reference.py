#!/usr/bin/python3
"""An independent Llama reference: Hugging Face's LlamaForCausalLM math written out in plain
PyTorch, in float64, from the model card and transformers' modeling_llama.py - not the C++ code
under test, and without transformers (not installed). Qwen2 / Qwen3 configs (model_type "qwen2":
q/k/v biases; "qwen3": q_norm / k_norm and head_dim) are the same model with those additions.

Reads a Hugging Face model directory (config.json + model.safetensors, or the shards of
model.safetensors.index.json, parsed here with numpy) and a tokens file (JSON:
{"input_ids": [[...]], "labels": [[...]]}; labels as in Hugging Face - the model shifts them,
-100 is ignored; optionally "segment_ids": [[...]] for examples packed into a row: attention
stays within an example, positions restart at each, and an example's first token is not
predicted from the one before), runs forward and backward, and writes a safetensors file of F64
tensors: "logits" [B, T, V], "loss" [], and "grad.<parameter name>" for every parameter in the
checkpoint.

Families: LlamaForCausalLM with rope_scaling (or rope_parameters) of type default, linear,
dynamic or llama3 (transformers' modeling_rope_utils formulas, written out below), and
MistralForCausalLM with its sliding_window (query i attends keys j with i - j < window).

Run with Debian's interpreter: /usr/bin/python3 torch_llama_reference.py MODEL_DIR TOKENS OUT
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    """{name: float64 torch tensor} for the F32/F16/BF16 tensors of one file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        dtype = info["dtype"]
        if dtype == "F32":
            arr = np.frombuffer(buf, dtype="<f4").astype(np.float64)
        elif dtype == "F16":
            arr = np.frombuffer(buf, dtype="<f2").astype(np.float64)
        elif dtype == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32).astype(np.float64)
        else:
            raise ValueError(f"{path}: tensor {name} has dtype {dtype}")
        out[name] = torch.from_numpy(arr.reshape(info["shape"]).copy())
    return out


def read_checkpoint(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(read_safetensors(os.path.join(model_dir, shard)))
        return {name: tensors[name] for name in weight_map}
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


def write_safetensors_f64(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_inv_freq(cfg, head_dim, seq_len):
    """Inverse frequencies [head_dim / 2]; seq_len = largest position + 1 (dynamic only)."""
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "linear", "dynamic", "llama3"):
        raise ValueError(f"rope type {kind}")
    if kind == "dynamic" and seq_len > cfg["max_position_embeddings"]:
        # NTK-aware: a larger base for sequences longer than max_position_embeddings.
        f = rope["factor"]
        stretch = f * seq_len / cfg["max_position_embeddings"] - (f - 1)
        theta = theta * stretch ** (head_dim / (head_dim - 2))
    inv_freq = theta ** -(torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if kind == "linear":
        inv_freq = inv_freq / rope["factor"]
    elif kind == "llama3":
        f, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        ctx = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (ctx / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv_freq / f + smooth * inv_freq
        inv_freq = torch.where(wavelen < ctx / hi, inv_freq,
                               torch.where(wavelen > ctx / lo, inv_freq / f, mid))
    return inv_freq


def packing(tokens, B, T):
    """segment ids [B, T] (one segment per row when not packed) and positions [B, T]."""
    seg = torch.tensor(tokens["segment_ids"]) if "segment_ids" in tokens else torch.zeros(B, T)
    pos = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        for t in range(1, T):
            pos[b, t] = pos[b, t - 1] + 1 if seg[b, t] == seg[b, t - 1] else 0
    return seg, pos


def qwen_projection(cfg, p, name, x, n_heads, head_dim, eps):
    """Qwen's q/k/v projection (transformers' modeling_qwen2 / modeling_qwen3): Qwen2 adds the
    projection's bias; Qwen3 applies an RMSNorm over head_dim to every head of q and k
    (q_norm / k_norm) before RoPE. Returns [B, T, heads, head_dim]."""
    B, T = x.shape[0], x.shape[1]
    y = x @ p[name + "_proj.weight"].T
    if cfg.get("model_type") == "qwen2":
        y = y + p[name + "_proj.bias"]
    y = y.view(B, T, n_heads, head_dim)
    if cfg.get("model_type") == "qwen3" and name[-1] in "qk":
        y = rms_norm(y, p[name + "_norm.weight"], eps)
    return y


def llama_forward(cfg, p, input_ids, seg=None, pos=None):
    hidden = cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or hidden // n_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    B, T = input_ids.shape
    if seg is None:  # one example per row, positions 0..T-1
        seg, pos = packing({}, B, T)

    # RoPE (rotate-half convention): angle(t, j) = position(t) * inv_freq[j].
    inv_freq = rope_inv_freq(cfg, head_dim, int(pos.max()) + 1)
    angles = pos[:, :, None] * inv_freq[None, None, :]  # [B, T, head_dim / 2]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, T, head_dim]
    qi, kj = torch.arange(T)[:, None], torch.arange(T)[None, :]
    allowed = (kj <= qi)[None] & (seg[:, :, None] == seg[:, None, :])  # [B, T, T]
    if cfg.get("model_type") == "mistral" and cfg.get("sliding_window") is not None:
        allowed = allowed & (qi - kj < cfg["sliding_window"])[None]
    allowed = allowed[:, None]  # [B, 1, T, T]

    h = p["model.embed_tokens.weight"][input_ids]  # [B, T, hidden]
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        q = qwen_projection(cfg, p, pre + "self_attn.q", x, n_heads, head_dim, eps)
        k = qwen_projection(cfg, p, pre + "self_attn.k", x, n_kv, head_dim, eps)
        v = qwen_projection(cfg, p, pre + "self_attn.v", x, n_kv, head_dim, eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Grouped-query attention: query head j reads key/value head j // (n_heads / n_kv).
        k = k.repeat_interleave(n_heads // n_kv, dim=1)
        v = v.repeat_interleave(n_heads // n_kv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(head_dim)
        scores = scores.masked_fill(~allowed, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v  # [B, heads, T, hd]
        attn = attn.transpose(1, 2).reshape(B, T, n_heads * head_dim)
        h = h + attn @ p[pre + "self_attn.o_proj.weight"].T
        x = rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps)
        gate = x @ p[pre + "mlp.gate_proj.weight"].T
        up = x @ p[pre + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T
    h = rms_norm(h, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return h @ head.T  # [B, T, vocab]


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    model_dir, tokens_path, out_path = argv[1:]
    torch.set_num_threads(2)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(tokens_path) as f:
        tokens = json.load(f)
    params = {name: t.requires_grad_(True) for name, t in read_checkpoint(model_dir).items()}
    input_ids = torch.tensor(tokens["input_ids"], dtype=torch.long)
    labels = torch.tensor(tokens["labels"], dtype=torch.long)

    seg, pos = packing(tokens, *input_ids.shape)
    logits = llama_forward(cfg, params, input_ids, seg, pos)
    vocab = logits.shape[-1]
    # Hugging Face's loss: position t predicts labels[t + 1]; mean over labels that are not -100
    # (nor the first token of a packed example).
    targets = labels[:, 1:].masked_fill(seg[:, 1:] != seg[:, :-1], -100)
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1, :].reshape(-1, vocab), targets.reshape(-1), ignore_index=-100)
    loss.backward()

    out = {"logits": logits, "loss": loss.reshape(())}
    for name, t in params.items():
        out["grad." + name] = t.grad if t.grad is not None else torch.zeros_like(t)
    write_safetensors_f64(out_path, out)


if __name__ == "__main__":
    main(sys.argv)
