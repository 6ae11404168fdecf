#include "tests/cpu_adam/optimizer_problem.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "cpu_adam/reference_step.h"

namespace strata::testing {
namespace {

constexpr double kFloatEps = 1.0 / (1 << 24);  // unit roundoff of fp32

uint16_t Narrow(DType dtype, float f) {
  return dtype == DType::kFloat16 ? FloatToFp16(f) : FloatToBf16(f);
}

}  // namespace

OptimizerProblem::OptimizerProblem(OptimizerKind kind_in, size_t numel_in, DType grad_dtype_in,
                                   bool with_copy_in, DType copy_dtype_in, float grad_scale_in,
                                   uint64_t seed)
    : kind(kind_in),
      numel(numel_in),
      grad_dtype(grad_dtype_in),
      with_copy(with_copy_in),
      copy_dtype(copy_dtype_in),
      grad_scale(grad_scale_in),
      params(numel),
      exp_avg(numel),
      exp_avg_sq(numel),
      copy(with_copy && copy_dtype != DType::kFloat32 ? numel : 0),
      copy_f32(with_copy && copy_dtype == DType::kFloat32 ? numel : 0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float v_max = kind == OptimizerKind::kAdagrad ? 1.0f : 0.01f;
  for (size_t i = 0; i < numel; ++i) {
    params[i] = u(rng);
    exp_avg[i] = 0.05f * u(rng);
    exp_avg_sq[i] = v_max * 0.5f * (u(rng) + 1.0f);
  }
  NewGrads(seed ^ 0x5EEDu);
}

void OptimizerProblem::NewGrads(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  grads_f32.assign(grad_dtype == DType::kFloat32 ? numel : 0, 0.0f);
  grads_16.assign(grad_dtype == DType::kFloat32 ? 0 : numel, 0);
  for (size_t i = 0; i < numel; ++i) {
    const float g = u(rng) / grad_scale;
    if (grad_dtype == DType::kFloat32) {
      grads_f32[i] = g;
    } else {
      grads_16[i] = Narrow(grad_dtype, g);
    }
  }
}

StepTensors OptimizerProblem::Tensors() {
  StepTensors t;
  t.numel = numel;
  t.params = params.data();
  t.grads = grad_dtype == DType::kFloat32 ? static_cast<const void*>(grads_f32.data())
                                          : static_cast<const void*>(grads_16.data());
  t.grad_dtype = grad_dtype;
  if (kind != OptimizerKind::kAdagrad) t.exp_avg = exp_avg.data();
  if (kind != OptimizerKind::kLion) t.exp_avg_sq = exp_avg_sq.data();
  if (with_copy) {
    t.param_copy = copy_dtype == DType::kFloat32 ? static_cast<void*>(copy_f32.data())
                                                 : static_cast<void*>(copy.data());
    t.param_copy_dtype = copy_dtype;
  }
  return t;
}

std::vector<double> OptimizerProblem::GradsAsDouble() const {
  std::vector<double> g(numel);
  for (size_t i = 0; i < numel; ++i) {
    switch (grad_dtype) {
      case DType::kFloat32:
        g[i] = grads_f32[i];
        break;
      case DType::kFloat16:
        g[i] = Fp16ToFloat(grads_16[i]);
        break;
      case DType::kBFloat16:
        g[i] = Bf16ToFloat(grads_16[i]);
        break;
    }
  }
  return g;
}

DoubleState::DoubleState(const OptimizerProblem& p)
    : params(p.params.begin(), p.params.end()),
      exp_avg(p.exp_avg.begin(), p.exp_avg.end()),
      exp_avg_sq(p.exp_avg_sq.begin(), p.exp_avg_sq.end()) {}

std::string CompareStep(const DoubleState& before, const std::vector<double>& grads,
                        const Hyperparams& hp, int64_t step, const OptimizerProblem& after,
                        double ulps) {
  const size_t n = after.numel;
  DoubleState ref = before;
  ReferenceStep(after.kind, hp, step, after.grad_scale, grads.data(), ref.params.data(),
                ref.exp_avg.data(), ref.exp_avg_sq.data(), n);
  const double tol = ulps * kFloatEps;
  const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.weight_decay;
  std::ostringstream err;
  int bad = 0;
  auto fail = [&](const char* what, size_t i, double got, double want, double bound) {
    if (++bad <= 5) {
      err << what << "[" << i << "] = " << got << ", reference " << want << " (|diff| "
          << std::fabs(got - want) << " > bound " << bound << ")\n";
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const double p0 = before.params[i];
    const double g = grads[i] * after.grad_scale;
    const double p = after.params[i];
    double p_mag = 0;  // magnitude of the terms that make up the new p
    switch (after.kind) {
      case OptimizerKind::kAdam: {
        const double gl = hp.adam_w_mode ? std::fabs(g) : std::fabs(g) + wd * std::fabs(p0);
        const double m_mag = b1 * std::fabs(before.exp_avg[i]) + (1 - b1) * gl;
        const double v_mag = b2 * before.exp_avg_sq[i] + (1 - b2) * gl * gl;
        const double bc1 = hp.bias_correction ? 1 - std::pow(b1, double(step)) : 1.0;
        const double bc2 = hp.bias_correction ? 1 - std::pow(b2, double(step)) : 1.0;
        const double denom = std::sqrt(ref.exp_avg_sq[i] / bc2) + hp.eps;
        p_mag = std::fabs(p0) + (lr / bc1) * m_mag / denom;
        const double bm = tol * m_mag, bv = tol * v_mag;
        if (std::fabs(after.exp_avg[i] - ref.exp_avg[i]) > bm) {
          fail("exp_avg", i, after.exp_avg[i], ref.exp_avg[i], bm);
        }
        if (std::fabs(after.exp_avg_sq[i] - ref.exp_avg_sq[i]) > bv) {
          fail("exp_avg_sq", i, after.exp_avg_sq[i], ref.exp_avg_sq[i], bv);
        }
        break;
      }
      case OptimizerKind::kAdagrad: {
        const double gl = std::fabs(g) + wd * std::fabs(p0);
        const double s_mag = before.exp_avg_sq[i] + gl * gl;
        p_mag = std::fabs(p0) + lr * gl / (std::sqrt(ref.exp_avg_sq[i]) + hp.eps);
        if (std::fabs(after.exp_avg_sq[i] - ref.exp_avg_sq[i]) > tol * s_mag) {
          fail("sum_sq", i, after.exp_avg_sq[i], ref.exp_avg_sq[i], tol * s_mag);
        }
        break;
      }
      case OptimizerKind::kLion: {
        const double m0 = before.exp_avg[i];
        const double c_mag = b1 * std::fabs(m0) + (1 - b1) * std::fabs(g);
        const double c = b1 * m0 + (1 - b1) * g;
        // Near zero the float sign may legitimately differ: allow p to move by 2 * lr more.
        p_mag = std::fabs(p0) + lr;
        if (std::fabs(c) <= tol * c_mag && std::fabs(p - ref.params[i]) <= 2 * lr + tol * p_mag) {
          p_mag = -1;  // accepted
        }
        const double m_mag = b2 * std::fabs(m0) + (1 - b2) * std::fabs(g);
        if (std::fabs(after.exp_avg[i] - ref.exp_avg[i]) > tol * m_mag) {
          fail("exp_avg", i, after.exp_avg[i], ref.exp_avg[i], tol * m_mag);
        }
        break;
      }
    }
    if (p_mag >= 0 && std::fabs(p - ref.params[i]) > tol * p_mag) {
      fail("params", i, p, ref.params[i], tol * p_mag);
    }
    if (after.with_copy && after.copy_dtype == DType::kFloat32) {
      if (std::memcmp(&after.copy_f32[i], &after.params[i], sizeof(float)) != 0) {
        fail("param_copy", i, after.copy_f32[i], after.params[i], 0);
      }
    } else if (after.with_copy) {
      const uint16_t want = after.copy_dtype == DType::kFloat16 ? FloatToFp16(after.params[i])
                                                                : FloatToBf16(after.params[i]);
      if (after.copy[i] != want) {
        fail("param_copy", i, after.copy[i], want, 0);
      }
    }
  }
  if (bad > 5) err << "... " << bad << " mismatches in all\n";
  return err.str();
}

}  // namespace strata::testing
