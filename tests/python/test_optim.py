"""strata.optim against torch.optim and plain float64 references.

Stated tolerance, used by every comparison with torch or a reference: after 20 steps each param
and state element x must satisfy |x - ref| <= ATOL + RTOL * |ref| with ATOL = 1e-6 and
RTOL = 5e-6 (about 40 float32 ulps). The kernel and torch round differently (FMA, order of
operations, float vs double step constants), so they agree to a few ulps, not bitwise; the
worst case seen here over seeds and ISAs (avx512, avx2, scalar) is about a quarter of the bound.
The float64 references take the hyperparameters rounded to float32, as the kernel does (with
0.999 in double instead, v differs by 1.3e-5 relative). State round trips and fused copies are
checked bitwise: they run the same kernel on the same inputs.
"""

import copy
import io
import sys
import unittest

import support

torch = support.require_torch()
import strata  # noqa: E402
import strata.optim  # noqa: E402

ATOL = 1e-6
RTOL = 5e-6
STEPS = 20
SHAPES = [(1,), (7,), (13, 17), (4099,), (64, 65)]  # odd sizes: ragged SIMD tails
GRAD_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def f32(x):
    """`x` rounded to float32: the kernel takes its hyperparameters as float32 (as DeepSpeed's
    does), so the float64 references start from the same values."""
    return torch.tensor(x, dtype=torch.float32).item()


def random_params(gen):
    return [torch.randn(s, generator=gen, dtype=torch.float32) for s in SHAPES]


def random_grads(gen, params, dtype):
    """Gradients in `dtype` and the exact fp32 values they hold (what the kernel computes on)."""
    grads = [(torch.randn(p.shape, generator=gen) * 0.1).to(dtype) for p in params]
    return grads, [g.float() for g in grads]


class Close(unittest.TestCase):
    def assert_close(self, actual, expected, what):
        expected = expected.to(actual.dtype) if expected.dtype != torch.float64 else expected
        diff = (actual.double() - expected.double()).abs()
        bound = ATOL + RTOL * expected.double().abs()
        worst = (diff - bound).max().item()
        if worst > 0:
            i = int((diff - bound).argmax())
            self.fail(f"{what}: element {i} is {actual.flatten()[i].item()!r}, reference "
                      f"{expected.flatten()[i].item()!r} (|diff| {diff.flatten()[i].item():.3g} > "
                      f"{ATOL} + {RTOL}*|ref|)")


class CPUAdamVsTorchTest(Close):
    def run_pair(self, grad_dtype, weight_decay, adamw_mode):
        gen = torch.Generator().manual_seed(support.seed())
        ours = random_params(gen)
        theirs = [p.clone() for p in ours]
        for p in ours + theirs:
            p.requires_grad_(True)
        opt = strata.optim.CPUAdam(ours, lr=1e-2, betas=(0.8, 0.95), eps=1e-8,
                                   weight_decay=weight_decay, adamw_mode=adamw_mode)
        cls = torch.optim.AdamW if adamw_mode else torch.optim.Adam
        ref = cls(theirs, lr=1e-2, betas=(0.8, 0.95), eps=1e-8, weight_decay=weight_decay,
                  foreach=False)
        for _ in range(STEPS):
            grads, grads32 = random_grads(gen, ours, grad_dtype)
            if grad_dtype == torch.float32:
                for p, g in zip(ours, grads):
                    p.grad = g.clone()
                opt.step()
            else:
                opt.step(grads=grads)
            for p, g in zip(theirs, grads32):
                p.grad = g
            ref.step()
        for i, (a, b) in enumerate(zip(ours, theirs)):
            self.assert_close(a.detach(), b.detach(), f"param {i}")
            for key in ("exp_avg", "exp_avg_sq"):
                self.assert_close(opt.state[a][key], ref.state[b][key], f"param {i} {key}")
            self.assertEqual(opt.state[a]["step"].item(), STEPS)

    def test_adamw_equals_torch_adamw(self):
        for dtype in GRAD_DTYPES:
            for wd in (0.0, 0.1):
                with self.subTest(grad_dtype=str(dtype), weight_decay=wd):
                    self.run_pair(dtype, wd, adamw_mode=True)

    def test_adam_l2_equals_torch_adam(self):
        for dtype in GRAD_DTYPES:
            for wd in (0.0, 0.1):
                with self.subTest(grad_dtype=str(dtype), weight_decay=wd):
                    self.run_pair(dtype, wd, adamw_mode=False)


def adam_reference(p, g, m, v, step, lr, b1, b2, eps, wd, adamw, bias_correction):
    """DeepSpeed's Adam update in float64, one plain formula (the oracle for bias_correction)."""
    if not adamw:
        g = g + wd * p
    m.mul_(b1).add_((1 - b1) * g)
    v.mul_(b2).add_((1 - b2) * g * g)
    bc1 = 1 - b1 ** step if bias_correction else 1.0
    bc2 = 1 - b2 ** step if bias_correction else 1.0
    if adamw:
        p.mul_(1 - lr * wd)
    p.sub_(lr / bc1 * m / (v.sqrt() / bc2 ** 0.5 + eps))


class CPUAdamVsReferenceTest(Close):
    def test_bias_correction_settings_equal_float64_reference(self):
        for bias_correction in (True, False):
            for adamw in (True, False):
                for dtype in GRAD_DTYPES:
                    with self.subTest(bias_correction=bias_correction, adamw=adamw,
                                      grad_dtype=str(dtype)):
                        self.run_reference(bias_correction, adamw, dtype)

    def run_reference(self, bias_correction, adamw, grad_dtype):
        gen = torch.Generator().manual_seed(support.seed() + 1)
        ours = random_params(gen)
        ref = [p.double() for p in ours]
        ms = [torch.zeros_like(p) for p in ref]
        vs = [torch.zeros_like(p) for p in ref]
        hp = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
        opt = strata.optim.CPUAdam(ours, **hp, adamw_mode=adamw, bias_correction=bias_correction)
        for step in range(1, STEPS + 1):
            grads, grads32 = random_grads(gen, ours, grad_dtype)
            opt.step(grads=grads)
            for p, g, m, v in zip(ref, grads32, ms, vs):
                adam_reference(p, g.double(), m, v, step, f32(1e-3), f32(0.9), f32(0.999),
                               f32(1e-8), f32(0.05), adamw, bias_correction)
        for i, (a, b) in enumerate(zip(ours, ref)):
            self.assert_close(a, b, f"param {i}")
            self.assert_close(opt.state[a]["exp_avg"], ms[i], f"param {i} exp_avg")
            self.assert_close(opt.state[a]["exp_avg_sq"], vs[i], f"param {i} exp_avg_sq")


class AdagradLionTest(Close):
    def test_adagrad_equals_float64_reference_and_torch(self):
        for dtype in GRAD_DTYPES:
            with self.subTest(grad_dtype=str(dtype)):
                gen = torch.Generator().manual_seed(support.seed() + 2)
                ours = random_params(gen)
                theirs = [p.clone() for p in ours]
                ref = [p.double() for p in ours]
                sums = [torch.full_like(p, 0.1) for p in ref]
                lr, eps, wd, lr_decay = 0.05, 1e-10, 0.01, 0.01
                opt = strata.optim.CPUAdagrad(ours, lr=lr, eps=eps, weight_decay=wd,
                                              lr_decay=lr_decay, initial_accumulator_value=0.1)
                tref = torch.optim.Adagrad(theirs, lr=lr, eps=eps, weight_decay=wd,
                                           lr_decay=lr_decay, initial_accumulator_value=0.1)
                for step in range(1, STEPS + 1):
                    grads, grads32 = random_grads(gen, ours, dtype)
                    opt.step(grads=grads)
                    for p, g in zip(theirs, grads32):
                        p.grad = g
                    tref.step()
                    clr = f32(lr / (1 + (step - 1) * lr_decay))
                    for p, g, s in zip(ref, grads32, sums):
                        g = g.double() + f32(wd) * p
                        s.add_(g * g)
                        p.sub_(clr * g / (s.sqrt() + f32(eps)))
                for i, p in enumerate(ours):
                    self.assert_close(p, ref[i], f"param {i}")
                    self.assert_close(opt.state[p]["exp_avg_sq"], sums[i], f"param {i} sum")
                    self.assert_close(p, theirs[i], f"param {i} vs torch.optim.Adagrad")

    def test_lion_equals_float64_reference(self):
        for dtype in GRAD_DTYPES:
            for wd in (0.0, 0.1):
                with self.subTest(grad_dtype=str(dtype), weight_decay=wd):
                    gen = torch.Generator().manual_seed(support.seed() + 3)
                    ours = random_params(gen)
                    ref = [p.double() for p in ours]
                    ms = [torch.zeros_like(p) for p in ref]
                    lr, b1, b2 = 1e-3, 0.9, 0.99
                    opt = strata.optim.CPULion(ours, lr=lr, betas=(b1, b2), weight_decay=wd)
                    for _ in range(STEPS):
                        grads, grads32 = random_grads(gen, ours, dtype)
                        opt.step(grads=grads)
                        for p, g, m in zip(ref, grads32, ms):
                            g = g.double()
                            update = torch.sign(f32(b1) * m + (1 - f32(b1)) * g)
                            p.mul_(1 - f32(lr) * f32(wd)).sub_(f32(lr) * update)
                            m.mul_(f32(b2)).add_((1 - f32(b2)) * g)
                    for i, p in enumerate(ours):
                        self.assert_close(p, ref[i], f"param {i}")
                        self.assert_close(opt.state[p]["exp_avg"], ms[i], f"param {i} exp_avg")


class StateDictTest(unittest.TestCase):
    def roundtrip(self, make):
        gen = torch.Generator().manual_seed(support.seed() + 4)
        params = random_params(gen)
        all_grads = [random_grads(gen, params, torch.bfloat16)[0] for _ in range(STEPS)]
        opt = make(params)
        for grads in all_grads[:STEPS // 2]:
            opt.step(grads=grads)
        # Through bytes, as a checkpoint would go: nothing shared with the running optimizer.
        blob = io.BytesIO()
        torch.save({"params": params, "optim": opt.state_dict()}, blob)
        blob.seek(0)
        saved = torch.load(blob)
        resumed_params = saved["params"]
        resumed = make(resumed_params)
        resumed.load_state_dict(saved["optim"])
        for grads in all_grads[STEPS // 2:]:
            opt.step(grads=grads)
            resumed.step(grads=grads)
        for i, (a, b) in enumerate(zip(params, resumed_params)):
            self.assertTrue(torch.equal(a, b), f"param {i} differs after resuming")
            for key, value in opt.state[a].items():
                self.assertTrue(torch.equal(value, resumed.state[b][key]), f"param {i} {key}")

    def test_adam_resumes_identically(self):
        self.roundtrip(lambda ps: strata.optim.CPUAdam(ps, lr=1e-2, weight_decay=0.01))

    def test_adagrad_resumes_identically(self):
        self.roundtrip(lambda ps: strata.optim.CPUAdagrad(ps, lr=1e-2, lr_decay=0.1))

    def test_lion_resumes_identically(self):
        self.roundtrip(lambda ps: strata.optim.CPULion(ps, lr=1e-3, weight_decay=0.1))

    def test_state_has_torch_adam_layout(self):
        p = torch.randn(10)
        p.grad = torch.randn(10)
        opt = strata.optim.CPUAdam([p])
        opt.step()
        ref_p = p.clone()
        ref_p.grad = p.grad.clone()
        ref = torch.optim.Adam([ref_p])
        ref.step()
        ours, theirs = opt.state_dict()["state"][0], ref.state_dict()["state"][0]
        self.assertEqual(sorted(ours), sorted(theirs))
        for key in ours:
            self.assertEqual(ours[key].dtype, theirs[key].dtype, key)
            self.assertEqual(ours[key].shape, theirs[key].shape, key)

    def test_loads_torch_adamw_state_and_continues_like_it(self):
        gen = torch.Generator().manual_seed(support.seed() + 5)
        theirs = random_params(gen)
        ref = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1, foreach=False)
        for _ in range(3):
            for p, g in zip(theirs, random_grads(gen, theirs, torch.float32)[1]):
                p.grad = g
            ref.step()
        ours = [p.clone() for p in theirs]
        opt = strata.optim.CPUAdam(ours, lr=1e-2, weight_decay=0.1)
        opt.load_state_dict(copy.deepcopy(ref.state_dict()))
        for _ in range(3):
            grads = random_grads(gen, theirs, torch.float32)[1]
            for p, g in zip(theirs, grads):
                p.grad = g
            ref.step()
            opt.step(grads=grads)
        for a, b in zip(ours, theirs):
            diff = (a - b).abs().max().item()
            self.assertLessEqual(diff, ATOL + RTOL * b.abs().max().item())


class FusedCopyTest(unittest.TestCase):
    def test_copy_is_updated_param_rounded_to_nearest_even(self):
        for copy_dtype in (torch.bfloat16, torch.float16):
            for kind in (strata.optim.CPUAdam, strata.optim.CPUAdagrad, strata.optim.CPULion):
                with self.subTest(copy=str(copy_dtype), optimizer=kind.__name__):
                    gen = torch.Generator().manual_seed(support.seed() + 6)
                    params = random_params(gen)
                    copies = [torch.empty(p.shape, dtype=copy_dtype) for p in params]
                    opt = kind(params)
                    for _ in range(3):
                        grads = random_grads(gen, params, copy_dtype)[0]
                        opt.step(fp16_param_groups=[copies], grads=grads)
                        for i, (p, c) in enumerate(zip(params, copies)):
                            self.assertTrue(torch.equal(c, p.to(copy_dtype)), f"copy {i}")

    def test_copy_does_not_change_the_update(self):
        gen = torch.Generator().manual_seed(support.seed() + 7)
        a = random_params(gen)
        b = [p.clone() for p in a]
        opt_a, opt_b = strata.optim.CPUAdam(a), strata.optim.CPUAdam(b)
        copies = [torch.empty(p.shape, dtype=torch.bfloat16) for p in b]
        for _ in range(3):
            grads = random_grads(gen, a, torch.float32)[0]
            opt_a.step(grads=grads)
            opt_b.step(grads=grads, fp16_param_groups=copies)
        for x, y in zip(a, b):
            self.assertTrue(torch.equal(x, y))


class BehaviourTest(Close):
    def test_grad_scale_unscales_gradients(self):
        gen = torch.Generator().manual_seed(support.seed() + 8)
        a = random_params(gen)
        b = [p.clone() for p in a]
        opt_a, opt_b = strata.optim.CPUAdam(a, lr=1e-2), strata.optim.CPUAdam(b, lr=1e-2)
        for _ in range(5):
            grads = random_grads(gen, a, torch.float32)[0]
            opt_a.step(grads=[g * 1024 for g in grads], grad_scale=1 / 1024)
            opt_b.step(grads=grads)
        for x, y in zip(a, b):  # scaling by a power of two is exact: bitwise equal
            self.assertTrue(torch.equal(x, y))

    def test_param_groups_and_missing_grads(self):
        p1, p2, p3 = torch.randn(5), torch.randn(6), torch.randn(7)
        before3 = p3.clone()
        opt = strata.optim.CPUAdam([{"params": [p1], "lr": 0.1}, {"params": [p2, p3]}], lr=1e-3)
        ref1, ref2 = p1.clone(), p2.clone()
        ref = torch.optim.AdamW([{"params": [ref1], "lr": 0.1}, {"params": [ref2]}], lr=1e-3,
                                weight_decay=0, foreach=False)
        p1.grad, p2.grad = torch.randn(5), torch.randn(6)  # p3 has no grad: skipped
        ref1.grad, ref2.grad = p1.grad.clone(), p2.grad.clone()
        opt.step()
        ref.step()
        self.assert_close(p1, ref1, "group 0")
        self.assert_close(p2, ref2, "group 1")
        self.assertTrue(torch.equal(p3, before3))
        self.assertEqual(len(opt.state[p3]), 0)

    def test_closure_and_training_loop(self):
        torch.manual_seed(support.seed())
        model = torch.nn.Linear(8, 1)
        x, y = torch.randn(64, 8), torch.randn(64, 1)
        opt = strata.optim.CPUAdam(model.parameters(), lr=0.05)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        first = closure().item()
        for _ in range(50):
            loss = opt.step(closure)
        self.assertLess(loss.item(), first)

    def test_lr_scheduler_changes_the_rate(self):
        p = torch.zeros(4)
        opt = strata.optim.CPULion([p], lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5)
        p.grad = torch.ones(4)
        opt.step()
        sched.step()
        self.assertTrue(torch.equal(p, torch.full((4,), -0.5)))  # lion moves lr * sign

    def test_kernel_is_reported(self):
        opt = strata.optim.CPUAdam([torch.zeros(1)])
        self.assertRegex(opt.kernel_name, r"^(scalar|avx2|avx512)")


class ErrorTest(unittest.TestCase):
    def assert_raises_with(self, exc, words, fn):
        with self.assertRaises(exc) as ctx:
            fn()
        for w in words:
            self.assertIn(w, str(ctx.exception))

    def test_bad_hyperparameters_name_the_field(self):
        self.assert_raises_with(ValueError, ["lr"], lambda: strata.optim.CPUAdam([torch.zeros(1)],
                                                                                 lr=-1))
        self.assert_raises_with(ValueError, ["beta"], lambda: strata.optim.CPUAdam(
            [torch.zeros(1)], betas=(1.5, 0.9)))
        self.assert_raises_with(ValueError, ["amsgrad"], lambda: strata.optim.CPUAdam(
            [torch.zeros(1)], amsgrad=True))

    def test_param_must_be_fp32(self):
        p = torch.zeros(4, dtype=torch.bfloat16)
        p.grad = torch.zeros(4, dtype=torch.bfloat16)
        opt = strata.optim.CPUAdam([p])
        self.assert_raises_with(ValueError, ["torch.bfloat16", "fp32", "fp16_param_groups"],
                                opt.step)

    def test_non_contiguous_and_non_cpu_are_refused(self):
        p = torch.zeros(4, 4).t()
        p.grad = torch.zeros(4, 4).t()
        self.assert_raises_with(ValueError, ["contiguous"], strata.optim.CPUAdam([p]).step)
        q = torch.zeros(4)
        meta = torch.empty(4, device="meta")
        self.assert_raises_with(ValueError, ["meta", "CPU tensors only"],
                                lambda: strata.optim.CPUAdam([q]).step(grads=[meta]))

    def test_mismatched_sizes_are_refused(self):
        p = torch.zeros(4)
        opt = strata.optim.CPUAdam([p])
        self.assert_raises_with(ValueError, ["grad has 5 elements", "param has 4"],
                                lambda: opt.step(grads=[torch.zeros(5)]))
        self.assert_raises_with(ValueError, ["fp16 param copy", "float32"],
                                lambda: opt.step(grads=[torch.zeros(4)],
                                                 fp16_param_groups=[torch.zeros(4)]))
        self.assert_raises_with(ValueError, ["grads has 2 groups"],
                                lambda: opt.step(grads=[[torch.zeros(4)], [torch.zeros(4)]]))
        self.assertEqual(opt.state[p]["step"].item(), 0)  # refused steps are not counted
        self.assertTrue(torch.equal(p, torch.zeros(4)))


if __name__ == "__main__":
    unittest.main(verbosity=2 if "-v" in sys.argv else 1)
