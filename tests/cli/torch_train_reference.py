#!/usr/bin/python3
"""The other side of tests/cli/train_families_test.cc: model directories in the families' real
layouts, and three AdamW steps of the same training in plain PyTorch (float64).

  write FAMILY DIR SEQ_LEN   writes DIR/config.json with the family's real config.json fields
                             (llama3.2: Llama 3.2's rope_scaling block as published, tied
                             embeddings; mistral: MistralForCausalLM with a sliding_window smaller
                             than SEQ_LEN; dynamic: a Llama with rope_scaling "dynamic" whose
                             max_position_embeddings is SEQ_LEN / 2, so training runs past it), DIR/model.safetensors of random fp32 weights, and
                             DIR/tokens.bin: SEQ_LEN random uint16 ids (nanoGPT's layout), so the
                             sampler of `strata train --seq-len SEQ_LEN` has exactly one window.
  train DIR DS_CONFIG STEPS BATCH OUT
                             trains the model of DIR on BATCH copies of tokens.bin for STEPS
                             steps as DeepSpeed's fp32 AdamW does (the config's lr, betas, eps,
                             weight_decay; gradients clipped to gradient_clipping by their global
                             norm: torch.nn.utils.clip_grad_norm_, whose max_norm / (norm + 1e-6)
                             is DeepSpeed's), with torch.optim.AdamW; writes OUT.json
                             {"losses": [...]} and OUT.safetensors (the final weights, F64).

The model is tests/models/torch_llama_reference.py's (RoPE types, sliding window, tied head),
imported from the directory given by STRATA_MODELS_TESTS. Run with /usr/bin/python3.
"""
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.environ["STRATA_MODELS_TESTS"])
import torch_llama_reference as ref  # noqa: E402

VOCAB = 512


def config(family, seq_len):
    common = {
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05, "torch_dtype": "float32", "transformers_version": "4.45.0",
        "use_cache": True, "vocab_size": VOCAB,
    }
    if family == "llama3.2":
        return dict(common, **{
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
            "head_dim": 16, "max_position_embeddings": 131072, "mlp_bias": False,
            "pretraining_tp": 1,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "rope_theta": 500000.0, "tie_word_embeddings": True,
        })
    if family == "mistral":
        return dict(common, **{
            "architectures": ["MistralForCausalLM"], "model_type": "mistral", "head_dim": None,
            "max_position_embeddings": 32768, "rope_theta": 1000000.0,
            "sliding_window": seq_len // 4, "tie_word_embeddings": False,
        })
    if family == "dynamic":
        return dict(common, **{
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
            "head_dim": 16, "max_position_embeddings": seq_len // 2, "mlp_bias": False,
            "pretraining_tp": 1, "rope_scaling": {"factor": 4.0, "rope_type": "dynamic"},
            "rope_theta": 10000.0, "tie_word_embeddings": False,
        })
    raise SystemExit(f"unknown family {family}")


def parameter_shapes(cfg):
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    shapes = {"model.embed_tokens.weight": [v, h]}
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        shapes.update({
            p + "self_attn.q_proj.weight": [h, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [i, h], p + "mlp.up_proj.weight": [i, h],
            p + "mlp.down_proj.weight": [h, i], p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
        })
    shapes["model.norm.weight"] = [h]
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [v, h]
    return shapes


def write_safetensors_f32(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
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


def write(family, out_dir, seq_len):
    os.makedirs(out_dir, exist_ok=True)
    cfg = config(family, seq_len)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rng = np.random.default_rng(20240 + len(family))
    tensors = {}
    for name, shape in parameter_shapes(cfg).items():
        if len(shape) == 1:  # RMSNorm weights near 1
            tensors[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            tensors[name] = 0.08 * rng.standard_normal(shape)
    write_safetensors_f32(os.path.join(out_dir, "model.safetensors"), tensors)
    rng.integers(0, VOCAB, seq_len).astype("<u2").tofile(os.path.join(out_dir, "tokens.bin"))


def train(model_dir, ds_config, steps, batch, out):
    torch.set_num_threads(2)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    with open(ds_config) as f:
        ds = json.load(f)
    opt_params = ds["optimizer"]["params"]
    ids = np.fromfile(os.path.join(model_dir, "tokens.bin"), dtype="<u2").astype(np.int64)
    input_ids = torch.from_numpy(ids).repeat(batch, 1)  # every row the file's one window
    labels = input_ids.clone()  # Hugging Face labels: the model shifts them
    params = {n: t.requires_grad_(True) for n, t in ref.read_checkpoint(model_dir).items()}
    opt = torch.optim.AdamW(params.values(), lr=opt_params["lr"],
                            betas=tuple(opt_params["betas"]), eps=opt_params["eps"],
                            weight_decay=opt_params["weight_decay"])
    seg, pos = ref.packing({}, *input_ids.shape)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = ref.llama_forward(cfg, params, input_ids, seg, pos)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), ds["gradient_clipping"])
        opt.step()
        losses.append(loss.item())
    with open(out + ".json", "w") as f:
        json.dump({"losses": losses}, f)
    ref.write_safetensors_f64(out + ".safetensors", params)


def main(argv):
    if len(argv) == 5 and argv[1] == "write":
        write(argv[2], argv[3], int(argv[4]))
    elif len(argv) == 7 and argv[1] == "train":
        train(argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
