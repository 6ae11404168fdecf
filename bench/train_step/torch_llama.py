#!/usr/bin/python3
"""PyTorch eager reference for bench/train_step: the same Llama-family model (transformers'
modeling_llama / modeling_qwen2 / modeling_qwen3 math, written here with plain torch ops, fp32)
run forward + backward on random tokens.

Usage: torch_llama.py '<config.json object>' BATCH SEQ THREADS

The config is the model's Hugging Face config.json (what Strata's LlamaConfigJson writes), read
as transformers reads it: head_dim (explicit, else hidden_size / num_attention_heads),
num_key_value_heads (grouped-query attention), rope_theta and rope_scaling (default, linear,
dynamic, llama3), tie_word_embeddings, and model_type "qwen2" (q/k/v biases) or "qwen3"
(q_norm / k_norm: an RMSNorm over head_dim on each head of q and k, before RoPE).
Then reads lines from stdin: "run N" runs N steps (forward, loss, backward) and prints the
elapsed seconds; "params" prints the model's parameter count (the
tied head counted once); "mem" prints the process's peak RSS growth over the moment before the first
step, in bytes (the step's peak: activations, the whole logits and what cross-entropy makes of
them, gradients); "quit" exits. Prints "ready" once the model is built.
"""
import json
import math
import resource
import sys
import time

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def rope_inv_freq(c, hd, seq_len):
    """transformers' modeling_rope_utils: inverse frequencies [hd / 2] for a sequence of
    seq_len positions (dynamic only depends on it)."""
    rope = c.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    base = c["rope_theta"]
    if kind == "dynamic" and seq_len > c["max_position_embeddings"]:
        f = rope["factor"]
        base *= (f * seq_len / c["max_position_embeddings"] - (f - 1)) ** (hd / (hd - 2))
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if kind == "linear":
        inv = inv / rope["factor"]
    elif kind == "llama3":
        f, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        ctx = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (ctx / wavelen - lo) / (hi - lo)
        inv = torch.where(wavelen < ctx / hi, inv,
                          torch.where(wavelen > ctx / lo, inv / f,
                                      (1 - smooth) * inv / f + smooth * inv))
    elif kind not in ("default", "dynamic"):
        raise ValueError(f"rope_type {kind}")
    return inv.float()


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, self.nh, self.kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = head_dim(c)
        i = c["intermediate_size"]
        bias = c.get("model_type") == "qwen2"  # Qwen2Attention: q, k, v with bias
        self.q_proj = torch.nn.Linear(h, self.nh * self.hd, bias=bias)
        self.k_proj = torch.nn.Linear(h, self.kv * self.hd, bias=bias)
        self.v_proj = torch.nn.Linear(h, self.kv * self.hd, bias=bias)
        self.o_proj = torch.nn.Linear(self.nh * self.hd, h, bias=False)
        self.qk_norm = c.get("model_type") == "qwen3"
        if self.qk_norm:  # Qwen3Attention: RMSNorm over head_dim on every head of q and k
            self.q_norm = RMSNorm(self.hd, c["rms_norm_eps"])
            self.k_norm = RMSNorm(self.hd, c["rms_norm_eps"])
        self.gate_proj = torch.nn.Linear(h, i, bias=False)
        self.up_proj = torch.nn.Linear(h, i, bias=False)
        self.down_proj = torch.nn.Linear(i, h, bias=False)
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        n = self.input_layernorm(x)
        q = self.q_proj(n).view(b, t, self.nh, self.hd)
        k = self.k_proj(n).view(b, t, self.kv, self.hd)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(n).view(b, t, self.kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.nh // self.kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd) + mask
        p = torch.softmax(s, dim=-1, dtype=torch.float32)
        a = torch.matmul(p, v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o_proj(a)
        n = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(n)) * self.up_proj(n))


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = torch.nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        for m in self.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                m.weight.data.normal_(0.0, 0.02)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids, labels):
        b, t = ids.shape
        inv = rope_inv_freq(self.c, head_dim(self.c), t)
        freqs = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               labels[:, 1:].reshape(-1), ignore_index=-100)


def main():
    c = json.loads(sys.argv[1])
    batch, seq, threads = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Llama(c)
    ids = torch.randint(0, c["vocab_size"], (batch, seq))
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "params":  # distinct parameters (a tied head counted once)
            print(sum(t.numel() for t in model.parameters()), flush=True)
            continue
        if words[0] == "mem":
            peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            print(f"{(peak_kib - base_kib) * 1024}", flush=True)
            continue
        steps = int(words[1])
        start = time.perf_counter()
        for _ in range(steps):
            loss = model(ids, ids)
            loss.backward()
        print(f"{time.perf_counter() - start:.6f}", flush=True)


if __name__ == "__main__":
    main()
