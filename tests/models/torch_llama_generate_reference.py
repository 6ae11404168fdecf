#!/usr/bin/python3
"""Greedy decoding reference for `strata generate`: the plain float64 PyTorch Llama of
torch_llama_reference.py (its llama_forward, written from transformers' modeling_llama.py), run
WITHOUT a KV cache - every step recomputes the whole sequence - on each prompt alone (no batch,
no padding).

With "cache": true in the input, the prompts instead run as transformers' generate runs them
with a KV cache, which is what differs for rope_scaling "dynamic" past max_position_embeddings:
each forward (the prefill of the batch padded to its longest prompt T, then one token per
sequence and step) rotates its new queries and keys with the frequencies of L = the largest
position in the batch + 1 (T at the prefill, T + k + 1 at decode step k), and the keys already
cached keep the rotation they were computed with. Written here from transformers'
dynamic_rope_update / _compute_dynamic_ntk_parameters: base' = base * (factor * L / max_pos -
(factor - 1)) ^ (head_dim / (head_dim - 2)), in float64 (torch_llama_reference.rope_inv_freq).
Each prompt still runs alone (no padding), only L follows the batch.

Input: MODEL_DIR, a JSON file {"prompts": [[ids...], ...], "steps": N, "cache": bool}, OUT.
Output (safetensors, F64): for each prompt b, "logits.<b>" [N + 1, vocab] - the logits of the
prompt's last token, then of each greedy token appended - and "tokens.<b>" [N + 1], the greedy
(argmax, lowest id on ties) token after each of those rows.

Run with Debian's interpreter: /usr/bin/python3 torch_llama_generate_reference.py MODEL TOKENS OUT
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama_reference import (llama_forward, qwen_projection, read_checkpoint,  # noqa
                                   rms_norm, rope_inv_freq, rotate_half, write_safetensors_f64)


def cached_forward(cfg, p, ids, start, rope_len, cache):
    """The last-token logits [vocab] of tokens `ids` at positions start.. of one sequence, given
    the rotated keys and values of positions 0..start-1 in `cache` (one [k, v] per layer, each
    [kv_heads, positions, head_dim]; extended here). RoPE uses the frequencies of rope_len."""
    hidden, n_heads = cfg["hidden_size"], cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads") or n_heads
    head_dim = cfg.get("head_dim") or hidden // n_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    T = len(ids)
    pos = torch.arange(start, start + T, dtype=torch.float64)
    angles = pos[:, None] * rope_inv_freq(cfg, head_dim, rope_len)[None, :]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos()[None], emb.sin()[None]  # [1, T, head_dim]
    h = p["model.embed_tokens.weight"][torch.tensor([ids])]  # [1, T, hidden]
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = rms_norm(h, p[pre + "input_layernorm.weight"], eps)
        q = qwen_projection(cfg, p, pre + "self_attn.q", x, n_heads, head_dim, eps)[0]
        k = qwen_projection(cfg, p, pre + "self_attn.k", x, n_kv, head_dim, eps)[0]
        v = qwen_projection(cfg, p, pre + "self_attn.v", x, n_kv, head_dim, eps)[0]
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, T, hd]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if len(cache) <= i:
            cache.append([k, v])
        else:
            cache[i] = [torch.cat((cache[i][0], k), 1), torch.cat((cache[i][1], v), 1)]
        keys = cache[i][0].repeat_interleave(n_heads // n_kv, dim=0)
        values = cache[i][1].repeat_interleave(n_heads // n_kv, dim=0)
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(head_dim)  # [heads, T, start + T]
        qi = torch.arange(start, start + T)[:, None]
        scores = scores.masked_fill(torch.arange(start + T)[None, :] > qi, float("-inf"))
        attn = (torch.softmax(scores, dim=-1) @ values).transpose(0, 1).reshape(1, T, -1)
        h = h + attn @ p[pre + "self_attn.o_proj.weight"].T
        x = rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps)
        gate = x @ p[pre + "mlp.gate_proj.weight"].T
        up = x @ p[pre + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(gate) * up) @ p[pre + "mlp.down_proj.weight"].T
    h = rms_norm(h[:, -1], p["model.norm.weight"], eps)[0]
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else p["lm_head.weight"]
    return h @ head.T


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    model_dir, tokens_path, out_path = argv[1:]
    torch.set_num_threads(2)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(tokens_path) as f:
        spec = json.load(f)
    params = read_checkpoint(model_dir)
    out = {}
    with torch.no_grad():
        for b, prompt in enumerate(spec["prompts"]):
            ids = list(prompt)
            rows, chosen = [], []
            longest = max(len(q) for q in spec["prompts"])
            cache = []
            for step in range(spec["steps"] + 1):
                if not spec.get("cache"):
                    logits = llama_forward(cfg, params, torch.tensor([ids], dtype=torch.long))[0, -1]
                elif step == 0:  # the prefill: the batch padded to its longest prompt
                    logits = cached_forward(cfg, params, ids, 0, longest, cache)
                else:  # the token at position len(ids) - 1; the batch's largest is longest + step - 1
                    logits = cached_forward(cfg, params, ids[-1:], len(ids) - 1, longest + step,
                                            cache)
                rows.append(logits)
                tok = int(torch.argmax(logits))  # the first maximum: the lowest id on ties
                chosen.append(float(tok))
                ids.append(tok)
            out[f"logits.{b}"] = torch.stack(rows)
            out[f"tokens.{b}"] = torch.tensor(chosen, dtype=torch.float64)
    write_safetensors_f64(out_path, out)


if __name__ == "__main__":
    main(sys.argv)
