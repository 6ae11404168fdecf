#include "cpu_adam/reference_step.h"

#include <cmath>

namespace strata {

void ReferenceStep(OptimizerKind kind, const Hyperparams& hp, int64_t step, double grad_scale,
                   const double* grads, double* params, double* exp_avg, double* exp_avg_sq,
                   size_t numel) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, eps = hp.eps, wd = hp.weight_decay;
  const double t = static_cast<double>(step);
  for (size_t i = 0; i < numel; ++i) {
    double g = grads[i] * grad_scale;
    double& p = params[i];
    switch (kind) {
      case OptimizerKind::kAdam: {
        if (!hp.adam_w_mode) g += wd * p;
        double& m = exp_avg[i];
        double& v = exp_avg_sq[i];
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        const double bc1 = hp.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
        const double bc2 = hp.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
        const double denom = std::sqrt(v) / std::sqrt(bc2) + eps;
        if (hp.adam_w_mode) p *= 1.0 - lr * wd;
        p -= (lr / bc1) * (m / denom);
        break;
      }
      case OptimizerKind::kAdagrad: {
        g += wd * p;
        double& s = exp_avg_sq[i];
        s += g * g;
        p -= lr * g / (std::sqrt(s) + eps);
        break;
      }
      case OptimizerKind::kLion: {
        double& m = exp_avg[i];
        const double c = b1 * m + (1.0 - b1) * g;
        const double sign = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
        p *= 1.0 - lr * wd;
        p -= lr * sign;
        m = b2 * m + (1.0 - b2) * g;
        break;
      }
    }
  }
}

}  // namespace strata
