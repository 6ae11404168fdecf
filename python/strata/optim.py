"""strata.optim: torch.optim optimizers that run Strata's SIMD CPU kernels.

    opt = strata.optim.CPUAdam(model.parameters(), lr=1e-3, weight_decay=0.01)   # AdamW
    loss.backward(); opt.step(); opt.zero_grad()

CPUAdam, CPUAdagrad and CPULion take DeepSpeedCPUAdam / DeepSpeedCPUAdagrad / DeepSpeedCPULion's
hyperparameters with the same meanings (and torch.optim's: CPUAdam(adamw_mode=True) is AdamW,
adamw_mode=False is Adam with L2 weight decay). Params and optimizer state are fp32 CPU tensors;
gradients may be fp32, fp16 or bf16 (pass 16-bit ones with step(grads=...), since torch keeps
p.grad in p's dtype). State is plain torch tensors in self.state - "step", "exp_avg",
"exp_avg_sq" (Adagrad: "step", "exp_avg_sq"; Lion: "step", "exp_avg") - so state_dict() and
load_state_dict() are torch's own; Adam's state has torch.optim.Adam's layout.

step(closure=None, fp16_param_groups=None, grads=None, grad_scale=1.0):
  fp16_param_groups  DeepSpeed's fused copy: per group, a list of fp16/bf16 tensors (one per
                     param, same numel) that receive the updated params rounded to nearest even,
                     in the same pass over memory.
  grads              per group, a list of gradient tensors (fp32/fp16/bf16) used instead of
                     p.grad. Either argument may also be one list (one group) or one tensor.
  grad_scale         gradients are multiplied by this first (e.g. 1 / loss_scale).
"""

import torch

from . import _C

__all__ = ["CPUAdam", "CPUAdagrad", "CPULion"]


def _per_group(arg, param_groups, name):
    """None, a tensor, a list (one group) or a list of lists (one per group) -> list of lists."""
    if arg is None:
        return None
    if isinstance(arg, torch.Tensor):
        arg = [[arg]]
    elif len(arg) > 0 and not isinstance(arg[0], (list, tuple)):
        arg = [arg]
    if len(arg) != len(param_groups):
        raise ValueError(f"{name} has {len(arg)} groups, the optimizer has {len(param_groups)}")
    for i, (tensors, group) in enumerate(zip(arg, param_groups)):
        if len(tensors) != len(group["params"]):
            raise ValueError(f"{name}[{i}] has {len(tensors)} tensors, param group {i} has "
                             f"{len(group['params'])} params")
    return arg


class _StrataOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer whose update is one call of Strata's kernel per parameter."""

    _kind = ""  # "adam" | "adagrad" | "lion"
    _state_keys = ()

    def __init__(self, params, defaults, num_threads, isa):
        super().__init__(params, defaults)
        self._num_threads = int(num_threads)
        self._isa = str(isa)
        self._kernel = _C.CpuOptimizer(self._kind, num_threads=self._num_threads, isa=self._isa)
        for group in self.param_groups:
            _C.validate_hyperparams(self._kind, self._hyperparams(group, 1))

    @property
    def kernel_name(self):
        """The SIMD kernel in use ("avx2", "avx512", "scalar"...)."""
        return self._kernel.kernel_name

    def _hyperparams(self, group, step):
        raise NotImplementedError

    def _init_state(self, p, state, group):
        state["step"] = torch.tensor(0.0)
        for key in self._state_keys:
            state[key] = torch.zeros(p.shape, dtype=torch.float32)

    @torch.no_grad()
    def step(self, closure=None, fp16_param_groups=None, grads=None, grad_scale=1.0):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        copies = _per_group(fp16_param_groups, self.param_groups, "fp16_param_groups")
        grads = _per_group(grads, self.param_groups, "grads")
        kernel = self._kernel
        grad_scale = float(grad_scale)
        for gi, group in enumerate(self.param_groups):
            hyperparams = {}  # by step number: params of a group usually share it
            for pi, p in enumerate(group["params"]):
                grad = grads[gi][pi] if grads is not None else p.grad
                if grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    self._init_state(p, state, group)
                step = int(state["step"].item()) + 1
                hp = hyperparams.get(step)
                if hp is None:
                    hp = hyperparams[step] = self._hyperparams(group, step)
                kernel.step(p, grad, state.get("exp_avg"), state.get("exp_avg_sq"), step, hp,
                            grad_scale, copies[gi][pi] if copies is not None else None)
                state["step"] += 1  # only once the update is done: a refused step is not counted
        return loss

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        # A state_dict saved by torch.optim (or an older strata) lacks some of our keys: they
        # take this optimizer's defaults. Options we cannot honour are refused, not ignored.
        for i, group in enumerate(self.param_groups):
            for key, value in self.defaults.items():
                group.setdefault(key, value)
            for key in ("amsgrad", "maximize", "nesterov"):
                if group.get(key):
                    raise ValueError(f"param group {i} of the loaded state_dict has {key}=True, "
                                     f"which {type(self).__name__} does not support")
            _C.validate_hyperparams(self._kind, self._hyperparams(group, 1))
        # The kernel needs contiguous fp32 CPU state and a step tensor (DeepSpeed saves an int).
        for state in self.state.values():
            for key in self._state_keys:
                if key in state:
                    state[key] = state[key].to(device="cpu", dtype=torch.float32).contiguous()
            if "step" in state and not isinstance(state["step"], torch.Tensor):
                state["step"] = torch.tensor(float(state["step"]))

    def __getstate__(self):
        s = super().__getstate__()
        s["_num_threads"], s["_isa"] = self._num_threads, self._isa
        return s

    def __setstate__(self, state):
        num_threads, isa = state.pop("_num_threads", 0), state.pop("_isa", "auto")
        super().__setstate__(state)
        self._num_threads, self._isa = num_threads, isa
        self._kernel = _C.CpuOptimizer(self._kind, num_threads=num_threads, isa=isa)


def _check_unsupported(amsgrad, fp32_optimizer_states):
    if amsgrad:
        raise ValueError("amsgrad=True is not supported (as in DeepSpeedCPUAdam)")
    if not fp32_optimizer_states:
        raise ValueError("fp32_optimizer_states=False is not supported: state is always fp32")


class CPUAdam(_StrataOptimizer):
    """Adam / AdamW on Strata's SIMD kernel (DeepSpeedCPUAdam's hyperparameters).

    adamw_mode=True: decoupled weight decay, p *= 1 - lr * weight_decay (torch.optim.AdamW).
    adamw_mode=False: L2, grad += weight_decay * p (torch.optim.Adam).
    bias_correction=False drops the 1 - beta^t factors (DeepSpeed's option).
    num_threads: 0 runs on oneTBB's default arena (all cores this process may use), N > 0 its own.
    """

    _kind = "adam"
    _state_keys = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 adamw_mode=True, bias_correction=True, *, amsgrad=False,
                 fp32_optimizer_states=True, num_threads=0, isa="auto"):
        _check_unsupported(amsgrad, fp32_optimizer_states)
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        adamw_mode=adamw_mode, bias_correction=bias_correction, amsgrad=False)
        super().__init__(params, defaults, num_threads, isa)

    def _hyperparams(self, group, step):
        beta1, beta2 = group["betas"]
        return _C.Hyperparams(float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                              float(group["weight_decay"]), bool(group["adamw_mode"]),
                              bool(group["bias_correction"]))


class CPUAdagrad(_StrataOptimizer):
    """Adagrad on Strata's SIMD kernel: torch.optim.Adagrad's rule (L2 weight decay, lr_decay,
    initial_accumulator_value) with DeepSpeedCPUAdagrad's defaults. The sum of squared gradients
    is state["exp_avg_sq"] (DeepSpeed's name; torch calls it "sum")."""

    _kind = "adagrad"
    _state_keys = ("exp_avg_sq",)

    def __init__(self, params, lr=1e-2, eps=1e-10, weight_decay=0, *, lr_decay=0,
                 initial_accumulator_value=0, amsgrad=False, fp32_optimizer_states=True,
                 num_threads=0, isa="auto"):
        _check_unsupported(amsgrad, fp32_optimizer_states)
        if lr_decay < 0:
            raise ValueError(f"lr_decay {lr_decay} must be >= 0")
        if initial_accumulator_value < 0:
            raise ValueError(f"initial_accumulator_value {initial_accumulator_value} must be >= 0")
        defaults = dict(lr=lr, eps=eps, weight_decay=weight_decay, lr_decay=lr_decay,
                        initial_accumulator_value=initial_accumulator_value)
        super().__init__(params, defaults, num_threads, isa)

    def _init_state(self, p, state, group):
        super()._init_state(p, state, group)
        init = group["initial_accumulator_value"]
        if init:
            state["exp_avg_sq"].fill_(float(init))

    def _hyperparams(self, group, step):
        # torch.optim.Adagrad's decayed rate: lr / (1 + (step - 1) * lr_decay).
        lr = float(group["lr"]) / (1.0 + (step - 1) * float(group["lr_decay"]))
        return _C.Hyperparams(lr, 0.9, 0.999, float(group["eps"]), float(group["weight_decay"]))


class CPULion(_StrataOptimizer):
    """Lion on Strata's SIMD kernel (DeepSpeedCPULion's hyperparameters): decoupled weight decay,
    p = p * (1 - lr * wd) - lr * sign(beta1 * m + (1 - beta1) * g), m = beta2 * m + (1 - beta2) * g
    (sign(0) = 0)."""

    _kind = "lion"
    _state_keys = ("exp_avg",)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), weight_decay=0, *,
                 fp32_optimizer_states=True, num_threads=0, isa="auto"):
        _check_unsupported(False, fp32_optimizer_states)
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay)
        super().__init__(params, defaults, num_threads, isa)

    def _hyperparams(self, group, step):
        beta1, beta2 = group["betas"]
        return _C.Hyperparams(float(group["lr"]), float(beta1), float(beta2), 0.0,
                              float(group["weight_decay"]))
