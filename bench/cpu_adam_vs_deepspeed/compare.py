#!/usr/bin/env python3
"""DeepSpeed's CPU Adam vs Strata's CPU Adam vs a plain -O3 loop, in one process, same memory.

All three update the same fp32 torch tensors (params, grads, exp_avg, exp_avg_sq) in place:
  deepspeed  DeepSpeedCPUAdam.step (AdamW), or with --ds-op a prebuilt DeepSpeed cpu_adam op
             called exactly as DeepSpeedCPUAdam.step calls it (adam_update per parameter);
  strata     strata::CpuOptimizer through ctypes (libstrata_adam_capi.so);
  plain      cpu_adam_roofline's plain loop through ctypes (same library).
Before timing, one step from identical inputs on a small size is checked for each against a
float64 reference (and so against each other). Then every round times each once, in forward
order on even rounds and reverse order on odd ones, the start rotating every two rounds; ratios
are medians over rounds of same-round time ratios (the machine is shared and noisy, and pairing
cancels the drift).

  compare.py [--params 256M] [--rounds 9] [--threads 2] [--json] [--ds-op PATH] [--lib PATH]
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_LIB = os.path.join(REPO, "build", "bench", "cpu_adam_vs_deepspeed",
                           "libstrata_adam_capi.so")
BYTES_PER_PARAM = 28  # read p, g, m, v; write p, m, v (fp32)
ALIAS_MODULUS = 32 << 20  # arrays an exact multiple of this apart are slow here (docs/cpu_adam.md)
MADV_HUGEPAGE = 14


def parse_count(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=parse_count, default=256 << 20,
                    help="parameters per array (K/M/G suffixes; default 256M)")
    ap.add_argument("--rounds", type=int, default=9, help="measured rounds (default 9)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first (default 1)")
    ap.add_argument("--threads", type=int, default=2, help="threads for all three (default 2)")
    ap.add_argument("--check-params", type=parse_count, default=(1 << 20) + 13,
                    help="size of the agreement check (default 1M + 13, to cover tails)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--stagger-mib", type=float, default=2.0,
                    help="extra distance between consecutive arrays carved from one buffer "
                    "(default 2; 0 puts them back to back, which aliases for power-of-two sizes)")
    ap.add_argument("--no-thp", action="store_true",
                    help="do not madvise(MADV_HUGEPAGE) the buffer")
    ap.add_argument("--lib", default=DEFAULT_LIB, help="path of libstrata_adam_capi.so")
    ap.add_argument("--ds-op", default=None,
                    help="a prebuilt DeepSpeed cpu_adam op (.so) to use instead of the deepspeed "
                    "package's DeepSpeedCPUAdam")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return ap.parse_args()


ARGS = parse_args()
# Before torch starts its OpenMP runtime (DeepSpeed's op runs `omp parallel for` in it).
# Set, not defaulted: an inherited OMP_NUM_THREADS would give DeepSpeed another thread count.
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)
import torch  # noqa: E402

LIBC = ctypes.CDLL(None)


def log(msg):
    if not ARGS.json:
        print(msg, flush=True)


def capture_stdout(fn):
    """Runs fn() with the process's fd 1 (C printf included) captured; returns (result, text)."""
    sys.stdout.flush()
    LIBC.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            result = fn()
        finally:
            LIBC.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode(errors="replace")


class AdamArgs(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("weight_decay", ctypes.c_float),
                ("adam_w_mode", ctypes.c_int), ("bias_correction", ctypes.c_int),
                ("step", ctypes.c_int64)]


HP = dict(lr=ARGS.lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=ARGS.weight_decay,
          adam_w_mode=True, bias_correction=True)


class Tensors:
    """p, g, m, v carved from one fp32 buffer, array k at k * (n * 4 + stagger) bytes."""

    def __init__(self, n, stagger_bytes, thp):
        align = 2 << 20
        stagger = int(stagger_bytes) // 4 * 4
        total_bytes = 4 * (n * 4 + stagger) + align
        self.buffer = torch.empty(total_bytes // 4, dtype=torch.float32)
        base = self.buffer.data_ptr()
        first = (-base) % align // 4  # first 2 MiB boundary, in floats
        if thp:
            length = (total_bytes - first * 4) // align * align
            LIBC.madvise(ctypes.c_void_p(base + first * 4), ctypes.c_size_t(length),
                         MADV_HUGEPAGE)
        step = (n * 4 + stagger) // 4
        self.p, self.g, self.m, self.v = (self.buffer.narrow(0, first + k * step, n)
                                          for k in range(4))
        self.n = n

    def arrays(self):
        return (self.p, self.g, self.m, self.v)

    def fill(self):
        """Sane optimizer values (as cpu_adam_roofline); touches every page."""
        self.p.uniform_(-0.5, 0.5)
        self.g.uniform_(-5e-3, 5e-3)
        self.m.zero_()
        self.v.fill_(1e-4)

    def layout(self):
        ptrs = [t.data_ptr() for t in self.arrays()]
        dists = [abs(a - b) for i, a in enumerate(ptrs) for b in ptrs[i + 1:]]
        common = 1 << 30
        while common > 1 and any(d % common for d in dists):
            common //= 2
        return {"addresses": [hex(p) for p in ptrs],
                "common_alignment_bytes": common,
                "aliased_32mib": any(d % ALIAS_MODULUS == 0 for d in dists)}


class Plain:
    name = "plain"

    def __init__(self, lib, t, threads):
        self.lib, self.t, self.threads, self.step_count = lib, t, threads, 0
        self.label = "plain loop (cpu_adam_roofline/streams.cc, -O3 -march=native)"

    def step(self, step=None):
        self.step_count = step if step is not None else self.step_count + 1
        a = AdamArgs(HP["lr"], HP["beta1"], HP["beta2"], HP["eps"], HP["weight_decay"],
                     int(HP["adam_w_mode"]), int(HP["bias_correction"]), self.step_count)
        p, g, m, v = (x.data_ptr() for x in self.t.arrays())
        rc = self.fn(ctypes.c_void_p(p), ctypes.c_void_p(g), ctypes.c_void_p(m),
                     ctypes.c_void_p(v), ctypes.c_size_t(self.t.n), ctypes.byref(a),
                     ctypes.c_int(self.threads))
        if rc != 0:
            raise RuntimeError(self.lib.strata_capi_last_error().decode())

    @property
    def fn(self):
        return self.lib.plain_adam_step_fp32


class Strata(Plain):
    name = "strata"

    def __init__(self, lib, t, threads):
        super().__init__(lib, t, threads)
        kernel = lib.strata_adam_kernel_name(threads).decode()
        self.label = f"strata::CpuOptimizer kernel {kernel}, own arena of {threads}"
        self.kernel = kernel

    @property
    def fn(self):
        return self.lib.strata_adam_step_fp32


class DeepSpeedPackage:
    """DeepSpeedCPUAdam itself; its state is pointed at our m and v (same memory)."""
    name = "deepspeed"

    def __init__(self, t):
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        import deepspeed
        self.t = t
        self.param = torch.nn.Parameter(t.p, requires_grad=True)
        assert self.param.data_ptr() == t.p.data_ptr()
        self.param.grad = t.g
        opt, out = capture_stdout(lambda: DeepSpeedCPUAdam(
            [self.param], lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]), eps=HP["eps"],
            weight_decay=HP["weight_decay"], bias_correction=HP["bias_correction"],
            adamw_mode=HP["adam_w_mode"]))
        self.opt = opt
        self.opt.state[self.param] = {"step": 0, "exp_avg": t.m, "exp_avg_sq": t.v}
        self.simd = simd_from_log(out)
        if self.simd.startswith("SIMD unknown"):  # creation not logged: ask the builder
            from deepspeed.ops.op_builder import CPUAdamBuilder
            self.simd = {"-D__AVX512__": "AVX512", "-D__AVX256__": "AVX2"}.get(
                CPUAdamBuilder().simd_width(), "scalar")
        self.label = f"DeepSpeedCPUAdam (deepspeed {deepspeed.__version__}), {self.simd}"

    def step(self, step=None):
        if step is not None:
            self.opt.state[self.param]["step"] = step - 1
        self.opt.step()


class DeepSpeedOp:
    """A prebuilt DeepSpeed cpu_adam op, driven as DeepSpeedCPUAdam.step drives it."""
    name = "deepspeed"
    opt_id = 0

    def __init__(self, t, path):
        import importlib.machinery
        import importlib.util
        module_name = os.path.basename(path).split(".")[0]
        loader = importlib.machinery.ExtensionFileLoader(module_name, path)
        spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
        self.op = importlib.util.module_from_spec(spec)
        loader.exec_module(self.op)
        self.t, self.step_count = t, 0
        _, out = capture_stdout(lambda: self.op.create_adam(
            self.opt_id, HP["lr"], HP["beta1"], HP["beta2"], HP["eps"], HP["weight_decay"],
            HP["adam_w_mode"], True))
        self.simd = simd_from_log(out)
        self.label = f"DeepSpeed cpu_adam op {os.path.basename(path)} (adam_update), {self.simd}"

    def step(self, step=None):
        self.step_count = step if step is not None else self.step_count + 1
        p, g, m, v = self.t.arrays()
        # The call DeepSpeedCPUAdam.step makes for each parameter.
        self.op.adam_update(self.opt_id, self.step_count, HP["lr"], HP["beta1"], HP["beta2"],
                            HP["eps"], HP["weight_decay"], HP["bias_correction"], p, g, m, v)


def simd_from_log(text):
    for isa in ("AVX512", "AVX2", "scalar"):
        if f"with {isa} arithmetic" in text:
            return isa
    return "SIMD unknown (no creation log)"


def make_impls(lib, t, threads):
    ds = DeepSpeedOp(t, os.path.abspath(ARGS.ds_op)) if ARGS.ds_op else DeepSpeedPackage(t)
    return [ds, Strata(lib, t, threads), Plain(lib, t, threads)]


def reference_step(p, g, m, v, step):
    """One AdamW step in float64 (PyTorch / DeepSpeed semantics), with the hyperparameters
    rounded to fp32 first as every kernel receives them (1 - fp32(0.999) is 1.3e-5 off 1e-3)."""
    f32 = [float(torch.tensor(HP[k], dtype=torch.float32))
           for k in ("beta1", "beta2", "lr", "eps", "weight_decay")]
    b1, b2, lr, eps, wd = f32
    p, g, m, v = (x.double() for x in (p, g, m, v))
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    denom = v.sqrt() / (1 - b2 ** step) ** 0.5 + eps
    p = p * (1 - lr * wd) - lr / (1 - b1 ** step) * m / denom
    return p, m, v


# fp32 results of a few roundings each: within 4 ulp (2^-21 = 4.8e-7) of the operands' size.
CHECK_REL = 2.0 ** -21


def check_agreement(lib, threads):
    """One step from identical inputs: each result against float64, and pairwise.

    Errors are relative to the operands' size, max(|new|, |old|) + |new - old| per element, so
    rounding in a value that cancels to near zero is not blamed on the kernel; the error is also
    reported relative to the largest update (for p that is bounded below by p's own rounding,
    ~3e-5 here; a wrong bias correction is off by > 1e-1, a missing decay by ~2e-3).
    """
    n, step = ARGS.check_params, 10
    gen = torch.Generator().manual_seed(1234)
    p0 = torch.randn(n, generator=gen) * 0.5
    g0 = torch.randn(n, generator=gen) * 1e-2
    m0 = torch.randn(n, generator=gen) * 1e-3
    v0 = torch.rand(n, generator=gen) * 1e-4
    ref = reference_step(p0, g0, m0, v0, step)
    scales = [torch.maximum(w.abs(), o.double().abs()) + (w - o.double()).abs()
              for w, o in zip(ref, (p0, m0, v0))]
    t = Tensors(n, 4096, thp=False)
    results, report, ok = {}, {}, True
    for impl in make_impls(lib, t, threads):
        for dst, src in zip(t.arrays(), (p0, g0, m0, v0)):
            dst.copy_(src)
        impl.step(step)
        results[impl.name] = [x.double() for x in (t.p, t.m, t.v)]
        errs = {}
        for label, got, want, orig, scale in zip(("p", "m", "v"), results[impl.name], ref,
                                                 (p0, m0, v0), scales):
            err = (got - want).abs()
            rel = (err / scale).max().item()
            upd = (err.max() / (want - orig.double()).abs().max()).item()
            errs[label] = {"max_rel": rel, "update_rel": upd}
            ok = ok and rel <= CHECK_REL and upd <= 1e-4
        report[impl.name] = errs
    names = list(results)
    pairs = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            worst = max(((x - y).abs() / s).max().item()
                        for x, y, s in zip(results[a], results[b], scales))
            pairs[f"{a}_vs_{b}"] = worst
            ok = ok and worst <= 2 * CHECK_REL
    report["pairwise_max_rel"] = pairs
    report["n"], report["step"], report["ok"] = n, step, ok
    return report


def time_rounds(impls, rounds, warmup):
    secs = {impl.name: [] for impl in impls}
    for r in range(warmup + rounds):
        # Rotate the starting implementation each pair of rounds and alternate direction, so that
        # every implementation runs first, middle and last equally often.
        k = (r // 2) % len(impls)
        rotated = impls[k:] + impls[:k]
        order = rotated if r % 2 == 0 else rotated[::-1]
        for impl in order:
            t0 = time.perf_counter()
            impl.step()
            dt = time.perf_counter() - t0
            if r >= warmup:
                secs[impl.name].append(dt)
        if r >= warmup:
            log("round %2d: " % (r - warmup) + "  ".join(
                f"{impl.name} {secs[impl.name][-1] * 1e3:7.1f} ms" for impl in impls))
    return secs


def paired(secs, num, den):
    """Median over rounds of secs[den][r] / secs[num][r]: num's speed relative to den's."""
    return statistics.median(d / n for n, d in zip(secs[num], secs[den]))


def main():
    json_out = sys.stdout
    if ARGS.json:
        # DeepSpeed's logger and its op loader print to stdout: keep stdout for the one JSON
        # object and send everything else (fd 1 included) to stderr.
        sys.stdout.flush()
        json_out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    torch.set_num_threads(ARGS.threads)
    lib = ctypes.CDLL(os.path.abspath(ARGS.lib))
    lib.strata_adam_kernel_name.restype = ctypes.c_char_p
    lib.strata_capi_last_error.restype = ctypes.c_char_p
    for fn in (lib.strata_adam_step_fp32, lib.plain_adam_step_fp32):
        fn.restype = ctypes.c_int

    check = check_agreement(lib, ARGS.threads)
    log(f"agreement check ({check['n']} params, one step at t={check['step']} from identical "
        f"inputs, vs float64): {'OK' if check['ok'] else 'FAILED'}")
    for name in ("deepspeed", "strata", "plain"):
        e = check[name]
        log(f"  {name:9s} " + "  ".join(
            f"{k}: max rel {v['max_rel']:.1e}, update rel {v['update_rel']:.1e}"
            for k, v in e.items()))
    log("  pairwise max rel: " + ", ".join(
        f"{k} {v:.1e}" for k, v in check["pairwise_max_rel"].items()))
    if not check["ok"]:
        print("compare.py: the three implementations do not agree; not timing", file=sys.stderr)
        return 1

    n = ARGS.params
    t = Tensors(n, ARGS.stagger_mib * (1 << 20), thp=not ARGS.no_thp)
    t0 = time.perf_counter()
    t.fill()
    layout = t.layout()
    impls = make_impls(lib, t, ARGS.threads)
    log(f"\ncompare: {n} params ({n * 16 / (1 << 30):.2f} GiB of fp32 p+g+m+v, filled in "
        f"{time.perf_counter() - t0:.1f} s), {ARGS.threads} threads, {ARGS.rounds} rounds + "
        f"{ARGS.warmup} warm-up, AdamW lr {HP['lr']} wd {HP['weight_decay']}, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads)")
    log(f"arrays at {' '.join(layout['addresses'])}: distances multiples of "
        f"{layout['common_alignment_bytes'] >> 10} KiB"
        + (" -- ALIASED (multiples of 32 MiB: slow here)" if layout["aliased_32mib"] else
           " (not multiples of 32 MiB)"))
    for impl in impls:
        log(f"  {impl.name:9s} {impl.label}")
    if impls[0].simd != "AVX2" and impls[0].simd != "AVX512":
        log(f"WARNING: DeepSpeed's op reports {impls[0].simd} (not a SIMD build)")

    secs = time_rounds(impls, ARGS.rounds, ARGS.warmup)
    med = {k: statistics.median(v) for k, v in secs.items()}
    gparams = {k: n / v / 1e9 for k, v in med.items()}
    ratios = {"strata_over_deepspeed": paired(secs, "strata", "deepspeed"),
              "strata_over_plain": paired(secs, "strata", "plain"),
              "deepspeed_over_plain": paired(secs, "deepspeed", "plain")}
    if ARGS.json:
        print(json.dumps({
            "params": n, "threads": ARGS.threads, "rounds": ARGS.rounds,
            "warmup": ARGS.warmup, "hyperparams": HP, "torch": torch.__version__,
            "gparams": gparams, "median_ms": {k: v * 1e3 for k, v in med.items()},
            "seconds": secs, **ratios,
            "labels": {impl.name: impl.label for impl in impls},
            "deepspeed_simd": impls[0].simd, "strata_kernel": impls[1].kernel,
            "layout": layout, "check": check}), file=json_out, flush=True)
        return 0
    print(f"\n{'impl':10s} {'median ms':>10s} {'Gparam/s':>9s} {'GB/s':>6s} {'vs deepspeed':>13s} "
          f"{'vs plain':>9s} {'range Gparam/s':>15s}")
    for impl in impls:
        k = impl.name
        lo, hi = n / max(secs[k]) / 1e9, n / min(secs[k]) / 1e9
        vs_ds = paired(secs, k, "deepspeed")
        vs_plain = paired(secs, k, "plain")
        print(f"{k:10s} {med[k] * 1e3:10.1f} {gparams[k]:9.3f} "
              f"{gparams[k] * BYTES_PER_PARAM:6.1f} {vs_ds:13.3f} {vs_plain:9.3f} "
              f"{lo:7.3f}-{hi:.3f}")
    print("ratios: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()) +
          " (medians over rounds of same-round ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
