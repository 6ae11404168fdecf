#!/usr/bin/python3
"""Greedy decoding reference for `strata generate`: the plain float64 PyTorch Llama of
torch_llama_reference.py (its llama_forward, written from transformers' modeling_llama.py), run
WITHOUT a KV cache - every step recomputes the whole sequence - on each prompt alone (no batch,
no padding).

Input: MODEL_DIR, a JSON file {"prompts": [[ids...], ...], "steps": N}, OUT.
Output (safetensors, F64): for each prompt b, "logits.<b>" [N + 1, vocab] - the logits of the
prompt's last token, then of each greedy token appended - and "tokens.<b>" [N + 1], the greedy
(argmax, lowest id on ties) token after each of those rows.

Run with Debian's interpreter: /usr/bin/python3 torch_llama_generate_reference.py MODEL TOKENS OUT
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama_reference import llama_forward, read_checkpoint, write_safetensors_f64  # noqa


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
            for _ in range(spec["steps"] + 1):
                logits = llama_forward(cfg, params, torch.tensor([ids], dtype=torch.long))[0, -1]
                rows.append(logits)
                tok = int(torch.argmax(logits))  # the first maximum: the lowest id on ties
                chosen.append(float(tok))
                ids.append(tok)
            out[f"logits.{b}"] = torch.stack(rows)
            out[f"tokens.{b}"] = torch.tensor(chosen, dtype=torch.float64)
    write_safetensors_f64(out_path, out)


if __name__ == "__main__":
    main(sys.argv)
