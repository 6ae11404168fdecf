#!/usr/bin/env python3
"""strata.optim.CPUAdam vs torch.optim.AdamW on the CPU, in one process, interleaved.

Run from the repository root after building the package (python/, docs/python.md):

    PYTHONPATH=build/python /usr/bin/python3 bench/python_optim.py [--params 100M]
        [--threads 2] [--rounds 7] [--tensor-numel 4M] [--json]

Every optimizer updates its own copy of the same fp32 params (split into tensors of
--tensor-numel elements) with the same fp32 gradients and AdamW hyperparameters. Torch variants:
the for-loop (foreach=False) and foreach=True implementations, and fused where this torch
version has it on the CPU (1.13's fused Adam is CUDA-only; the bench says so). Both libraries
get --threads threads (torch.set_num_threads; CPUAdam(num_threads=...)); the torch for-loop also
runs with 1 thread ("1t"), since torch's OpenMP threads can collapse on a busy machine. Each round runs every
variant once, in an order that reverses every round; after an untimed warm-up step (state
allocation, first touch). Ratios are medians over rounds of same-round ratios, so drift in
machine load between rounds cancels. strata_over_torch is against the fastest torch variant.
"""

import argparse
import inspect
import json
import os
import statistics
import sys
import time

import torch

import strata.optim


def parse_count(text):
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def make_tensors(total, per_tensor, fill):
    sizes = [per_tensor] * (total // per_tensor)
    if total % per_tensor:
        sizes.append(total % per_tensor)
    return [fill(n) for n in sizes]


def torch_variants(params, grads, hp, threads):
    """(name, optimizer) for each torch AdamW implementation available on the CPU here."""
    out, notes = [], []

    def own_params():
        ps = [p.clone() for p in params]
        for p, g in zip(ps, grads):
            p.grad = g
        return ps

    out.append(("torch AdamW for-loop", torch.optim.AdamW(own_params(), **hp, foreach=False)))
    out.append(("torch AdamW foreach", torch.optim.AdamW(own_params(), **hp, foreach=True)))
    if threads > 1:
        # torch's OpenMP threads can lose badly on a busy machine (barriers wait for a thread
        # that is not running); one thread is measured too so the headline never flatters.
        out.append(("torch AdamW for-loop 1t", torch.optim.AdamW(own_params(), **hp,
                                                                 foreach=False)))
    fused_cls = None
    for cls in (torch.optim.AdamW, torch.optim.Adam):
        if "fused" in inspect.signature(cls.__init__).parameters:
            fused_cls = cls
            break
    if fused_cls is None:
        notes.append(f"fused: torch {torch.__version__} has no fused Adam/AdamW")
    else:
        try:
            probe = torch.zeros(8)
            probe.grad = torch.zeros(8)
            kw = dict(hp) if fused_cls is torch.optim.AdamW else dict(hp, weight_decay=0)
            fused_cls([probe], **kw, fused=True).step()
            out.append((f"torch {fused_cls.__name__} fused",
                        fused_cls(own_params(), **kw, fused=True)))
        except (RuntimeError, ValueError, TypeError) as e:
            notes.append(f"fused: unavailable on the CPU in torch {torch.__version__} "
                         f"({str(e).splitlines()[0]})")
    return out, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="100M", help="fp32 params in total (e.g. 100M)")
    ap.add_argument("--tensor-numel", default="4M", help="elements per param tensor")
    ap.add_argument("--threads", type=int, default=2, help="threads for both libraries")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    total, per_tensor = parse_count(args.params), parse_count(args.tensor_numel)
    if total <= 0 or per_tensor <= 0 or args.threads <= 0 or args.rounds <= 0:
        ap.error("--params, --tensor-numel, --threads and --rounds must be > 0")

    load_before = os.getloadavg()[0]
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    params = make_tensors(total, per_tensor, lambda n: torch.randn(n, generator=gen))
    grads = make_tensors(total, per_tensor, lambda n: torch.randn(n, generator=gen) * 1e-3)
    hp = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)

    ours_params = [p.clone() for p in params]
    for p, g in zip(ours_params, grads):
        p.grad = g
    strata_opt = strata.optim.CPUAdam(ours_params, **hp, adamw_mode=True,
                                      num_threads=args.threads)
    variants = [("strata CPUAdam", strata_opt)]
    theirs, notes = torch_variants(params, grads, hp, args.threads)
    variants += theirs
    del params

    def torch_threads(name):
        return 1 if name.endswith(" 1t") else args.threads

    for name, opt in variants:  # warm-up: allocates and touches the state
        torch.set_num_threads(torch_threads(name))
        opt.step()

    times = {name: [] for name, _ in variants}
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, opt in order:
            torch.set_num_threads(torch_threads(name))
            t0 = time.perf_counter()
            opt.step()
            times[name].append(time.perf_counter() - t0)

    strata_name = variants[0][0]
    result = {
        "params": total,
        "tensor_numel": per_tensor,
        "threads": args.threads,
        "rounds": args.rounds,
        "torch_version": torch.__version__,
        "strata_kernel": strata_opt.kernel_name,
        "notes": notes,
        "loadavg_1min": [load_before, os.getloadavg()[0]],
        "variants": {},
    }
    for name, ts in times.items():
        med = statistics.median(ts)
        result["variants"][name] = {
            "median_ms": med * 1e3,
            "gparam_per_s": total / med / 1e9,
            "min_gparam_per_s": total / max(ts) / 1e9,
            "max_gparam_per_s": total / min(ts) / 1e9,
        }
        if name != strata_name:
            ratio = statistics.median(t / s for t, s in zip(ts, times[strata_name]))
            result["variants"][name]["strata_over_this"] = ratio
    torch_names = [n for n in times if n != strata_name]
    fastest = max(torch_names, key=lambda n: result["variants"][n]["gparam_per_s"])
    result["fastest_torch"] = fastest
    result["strata_over_torch"] = result["variants"][fastest]["strata_over_this"]
    same = [n for n in torch_names if not n.endswith(" 1t")]
    fastest_same = max(same, key=lambda n: result["variants"][n]["gparam_per_s"])
    result["strata_over_torch_same_threads"] = result["variants"][fastest_same]["strata_over_this"]
    result["target"] = 3.0

    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    print(f"{total / 1e6:.0f}M fp32 params in tensors of {per_tensor / 1e6:g}M, "
          f"{args.threads} threads, {args.rounds} rounds, torch {torch.__version__}, "
          f"strata kernel {strata_opt.kernel_name}, load average {load_before:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")
    print(f"{'variant':<24} {'median ms':>10} {'Gparam/s':>9} {'range Gparam/s':>15} "
          f"{'strata over it':>15}")
    for name, v in result["variants"].items():
        over = f"{v['strata_over_this']:.2f}x" if "strata_over_this" in v else ""
        print(f"{name:<24} {v['median_ms']:>10.1f} {v['gparam_per_s']:>9.3f} "
              f"{v['min_gparam_per_s']:>7.3f}-{v['max_gparam_per_s']:<7.3f} {over:>15}")
    for note in notes:
        print(note)
    print(f"strata_over_torch {result['strata_over_torch']:.2f} (vs {fastest}; target >= 3); "
          f"vs the fastest torch variant on {args.threads} threads "
          f"{result['strata_over_torch_same_threads']:.2f}")


if __name__ == "__main__":
    main()
