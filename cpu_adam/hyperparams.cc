#include "cpu_adam/hyperparams.h"

#include <cmath>
#include <string>

namespace strata {
namespace {

Status CheckRange(std::string_view name, float value, float lo, bool hi_open_one,
                  std::string_view allowed) {
  const bool ok = std::isfinite(value) && value >= lo && (!hi_open_one || value < 1.0f);
  if (ok) return Status::Ok();
  return InvalidArgumentError("optimizer hyperparameter " + std::string(name) + " = " +
                              std::to_string(value) + " (allowed: " + std::string(allowed) + ")");
}

}  // namespace

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kLion:
      return "lion";
  }
  return "unknown";
}

Hyperparams DefaultHyperparams(OptimizerKind kind) {
  Hyperparams hp;
  switch (kind) {
    case OptimizerKind::kAdam:
      break;
    case OptimizerKind::kAdagrad:
      hp.lr = 1e-2f;
      hp.eps = 1e-10f;
      break;
    case OptimizerKind::kLion:
      hp.lr = 1e-4f;
      hp.beta2 = 0.99f;
      break;
  }
  return hp;
}

Status ValidateHyperparams(OptimizerKind kind, const Hyperparams& hp) {
  const std::string ctx = std::string(OptimizerKindName(kind));
  STRATA_RETURN_IF_ERROR(CheckRange("lr", hp.lr, 0.0f, false, "finite, >= 0").WithContext(ctx));
  STRATA_RETURN_IF_ERROR(
      CheckRange("weight_decay", hp.weight_decay, 0.0f, false, "finite, >= 0").WithContext(ctx));
  if (kind != OptimizerKind::kLion) {
    STRATA_RETURN_IF_ERROR(CheckRange("eps", hp.eps, 0.0f, false, "finite, >= 0").WithContext(ctx));
  }
  if (kind != OptimizerKind::kAdagrad) {
    STRATA_RETURN_IF_ERROR(CheckRange("beta1", hp.beta1, 0.0f, true, "[0, 1)").WithContext(ctx));
    STRATA_RETURN_IF_ERROR(CheckRange("beta2", hp.beta2, 0.0f, true, "[0, 1)").WithContext(ctx));
  }
  return Status::Ok();
}

}  // namespace strata
