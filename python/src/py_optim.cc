// strata._C.CpuOptimizer: one SIMD optimizer step (Adam/AdamW, Adagrad, Lion) on tensors passed
// from Python. Stateless: the caller (strata/optim.py, a torch.optim.Optimizer) keeps the step
// count and the state tensors, so state_dict()/load_state_dict() are PyTorch's own.
//
// The GIL is released while the kernel runs (oneTBB threads, or the optimizer's own arena).
#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "cpu_adam/cpu_optimizer.h"
#include "python/src/py_buffer.h"
#include "python/src/py_errors.h"

namespace py = pybind11;

namespace strata::python {
namespace {

Result<OptimizerKind> ParseKind(const std::string& name) {
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  if (name == "lion") return OptimizerKind::kLion;
  return InvalidArgumentError("unknown optimizer '" + name + "'; allowed: adam, adagrad, lion");
}

// An fp32 tensor of `numel` elements (params and optimizer state).
BufferRef Fp32(py::handle obj, const char* what, size_t numel) {
  BufferRef b = GetBuffer(obj, what, /*need_writable=*/true);
  if (b.dtype != DType::kFloat32) {
    throw py::value_error(std::string(what) + " has dtype " + b.dtype_name +
                          "; strata optimizers keep fp32 params and state (keep an fp32 master "
                          "copy and pass the 16-bit copy as fp16_param_groups)");
  }
  if (numel != SIZE_MAX && b.numel != numel) {
    throw py::value_error(std::string(what) + " has " + std::to_string(b.numel) +
                          " elements, the param has " + std::to_string(numel));
  }
  return b;
}

class Optimizer {
 public:
  Optimizer(const std::string& kind, int num_threads, const std::string& isa) {
    auto k = ParseKind(kind);
    ThrowIfError(k.status());
    auto i = ParseSimdIsa(isa);
    ThrowIfError(i.status());
    CpuOptimizerOptions o;
    o.num_threads = num_threads;
    o.isa = *i;
    auto opt = CpuOptimizer::Create(*k, o);
    ThrowIfError(opt.status());
    opt_ = std::make_unique<CpuOptimizer>(std::move(opt).value());
  }

  // One update of `params` at step number `step` (>= 1). Adam uses exp_avg and exp_avg_sq,
  // Adagrad exp_avg_sq (its sum of squares), Lion exp_avg; the unused one may be None.
  void Step(py::handle params, py::handle grads, py::handle exp_avg, py::handle exp_avg_sq,
            int64_t step, const Hyperparams& hp, float grad_scale, py::handle param_copy) {
    const OptimizerKind kind = opt_->kind();
    BufferRef p = Fp32(params, "param", SIZE_MAX);
    BufferRef g = GetBuffer(grads, "grad", /*need_writable=*/false);
    if (!g.dtype.has_value()) {
      throw py::value_error("grad has dtype " + g.dtype_name +
                            "; allowed: float32, float16, bfloat16");
    }
    if (g.numel != p.numel) {
      throw py::value_error("grad has " + std::to_string(g.numel) + " elements, the param has " +
                            std::to_string(p.numel));
    }
    BufferRef m, v, copy;
    if (kind != OptimizerKind::kAdagrad) m = Fp32(exp_avg, "exp_avg", p.numel);
    if (kind != OptimizerKind::kLion) v = Fp32(exp_avg_sq, "exp_avg_sq", p.numel);
    StepTensors t;
    t.numel = p.numel;
    t.params = static_cast<float*>(p.data);
    t.grads = g.data;
    t.grad_dtype = *g.dtype;
    t.exp_avg = static_cast<float*>(m.data);
    t.exp_avg_sq = static_cast<float*>(v.data);
    if (!param_copy.is_none()) {
      copy = GetBuffer(param_copy, "fp16 param copy", /*need_writable=*/true);
      if (copy.dtype != DType::kFloat16 && copy.dtype != DType::kBFloat16) {
        throw py::value_error("fp16 param copy has dtype " + copy.dtype_name +
                              "; allowed: float16, bfloat16");
      }
      if (copy.numel != p.numel) {
        throw py::value_error("fp16 param copy has " + std::to_string(copy.numel) +
                              " elements, the param has " + std::to_string(p.numel));
      }
      t.param_copy = copy.data;
      t.param_copy_dtype = *copy.dtype;
    }
    StepOptions so;
    so.grad_scale = grad_scale;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = opt_->StepAt(hp, step, t, so);
    }
    ThrowIfError(st);
  }

  std::string kind() const { return std::string(OptimizerKindName(opt_->kind())); }
  std::string isa() const { return std::string(SimdIsaName(opt_->isa())); }
  std::string kernel_name() const { return opt_->kernel_name(); }

 private:
  std::unique_ptr<CpuOptimizer> opt_;
};

Hyperparams MakeHyperparams(float lr, float beta1, float beta2, float eps, float weight_decay,
                            bool adamw_mode, bool bias_correction) {
  Hyperparams hp;
  hp.lr = lr;
  hp.beta1 = beta1;
  hp.beta2 = beta2;
  hp.eps = eps;
  hp.weight_decay = weight_decay;
  hp.adam_w_mode = adamw_mode;
  hp.bias_correction = bias_correction;
  return hp;
}

}  // namespace

void RegisterOptim(py::module_& m) {
  py::class_<Hyperparams>(m, "Hyperparams", "One parameter group's optimizer hyperparameters.")
      .def(py::init(&MakeHyperparams), py::arg("lr"), py::arg("beta1") = 0.9f,
           py::arg("beta2") = 0.999f, py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.0f,
           py::arg("adamw_mode") = true, py::arg("bias_correction") = true)
      .def_readonly("lr", &Hyperparams::lr)
      .def_readonly("beta1", &Hyperparams::beta1)
      .def_readonly("beta2", &Hyperparams::beta2)
      .def_readonly("eps", &Hyperparams::eps)
      .def_readonly("weight_decay", &Hyperparams::weight_decay)
      .def_readonly("adamw_mode", &Hyperparams::adam_w_mode)
      .def_readonly("bias_correction", &Hyperparams::bias_correction);

  m.def(
      "validate_hyperparams",
      [](const std::string& kind, const Hyperparams& hp) {
        auto k = ParseKind(kind);
        ThrowIfError(k.status());
        ThrowIfError(ValidateHyperparams(*k, hp));
      },
      py::arg("kind"), py::arg("hyperparams"),
      "Raises ValueError naming the field when a hyperparameter is out of range.");

  py::class_<Optimizer>(m, "CpuOptimizer", "Strata's SIMD CPU optimizer kernels (stateless).")
      .def(py::init<const std::string&, int, const std::string&>(), py::arg("kind"),
           py::arg("num_threads") = 0, py::arg("isa") = "auto")
      .def("step", &Optimizer::Step, py::arg("params"), py::arg("grads"), py::arg("exp_avg"),
           py::arg("exp_avg_sq"), py::arg("step"), py::arg("hyperparams"),
           py::arg("grad_scale") = 1.0f, py::arg("param_copy") = py::none())
      .def_property_readonly("kind", &Optimizer::kind)
      .def_property_readonly("isa", &Optimizer::isa)
      .def_property_readonly("kernel_name", &Optimizer::kernel_name);
}

}  // namespace strata::python
