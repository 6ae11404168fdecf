#include "bench/cpu_adam_vs_deepspeed/strata_adam_capi.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "bench/cpu_adam_roofline/measure.h"
#include "bench/cpu_adam_roofline/streams.h"
#include "cpu_adam/cpu_optimizer.h"

namespace strata::bench {
namespace {

thread_local std::string g_last_error;

int Fail(std::string message) {
  g_last_error = std::move(message);
  return -1;
}

Hyperparams ToHyperparams(const StrataAdamArgs& a) {
  Hyperparams hp;
  hp.lr = a.lr;
  hp.beta1 = a.beta1;
  hp.beta2 = a.beta2;
  hp.eps = a.eps;
  hp.weight_decay = a.weight_decay;
  hp.adam_w_mode = a.adam_w_mode != 0;
  hp.bias_correction = a.bias_correction != 0;
  return hp;
}

// One optimizer (and so one arena) per thread count, created on first use and kept for the
// life of the process: creating an arena per step would time thread start-up, not Adam.
Result<const CpuOptimizer*> OptimizerFor(int num_threads) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<CpuOptimizer>> optimizers;
  std::lock_guard<std::mutex> lock(mu);
  auto it = optimizers.find(num_threads);
  if (it == optimizers.end()) {
    CpuOptimizerOptions o;
    o.num_threads = num_threads;
    Result<CpuOptimizer> r = CpuOptimizer::Create(OptimizerKind::kAdam, o);
    if (!r.ok()) return r.status();
    it =
        optimizers.emplace(num_threads, std::make_unique<CpuOptimizer>(std::move(r).value())).first;
  }
  return static_cast<const CpuOptimizer*>(it->second.get());
}

}  // namespace
}  // namespace strata::bench

using strata::bench::Fail;

extern "C" int strata_adam_step_fp32(float* params, const float* grads, float* exp_avg,
                                     float* exp_avg_sq, size_t numel, const StrataAdamArgs* args,
                                     int num_threads) {
  if (args == nullptr || num_threads < 1) return Fail("strata step: null args or threads < 1");
  strata::Result<const strata::CpuOptimizer*> opt = strata::bench::OptimizerFor(num_threads);
  if (!opt.ok()) return Fail("strata step: " + opt.status().ToString());
  strata::StepTensors t;
  t.numel = numel;
  t.params = params;
  t.grads = grads;
  t.grad_dtype = strata::DType::kFloat32;
  t.exp_avg = exp_avg;
  t.exp_avg_sq = exp_avg_sq;
  strata::Status s = opt.value()->StepAt(strata::bench::ToHyperparams(*args), args->step, t);
  if (!s.ok()) return Fail("strata step: " + s.ToString());
  return 0;
}

extern "C" const char* strata_adam_kernel_name(int num_threads) {
  if (num_threads < 1) return "";
  strata::Result<const strata::CpuOptimizer*> opt = strata::bench::OptimizerFor(num_threads);
  if (!opt.ok()) {
    Fail("strata kernel name: " + opt.status().ToString());
    return "";
  }
  return opt.value()->kernel_name();
}

extern "C" int plain_adam_step_fp32(float* params, const float* grads, float* exp_avg,
                                    float* exp_avg_sq, size_t numel, const StrataAdamArgs* args,
                                    int num_threads) {
  if (args == nullptr || num_threads < 1) return Fail("plain step: null args or threads < 1");
  if (args->adam_w_mode == 0) return Fail("plain step: only AdamW (adam_w_mode 1) is implemented");
  if (args->step < 1) return Fail("plain step: step must be >= 1");
  const strata::bench::PlainAdamArgs pa =
      strata::bench::MakePlainAdamArgs(args->lr, args->beta1, args->beta2, args->eps,
                                       args->weight_decay, args->step, args->bias_correction != 0);
  strata::bench::RunSplit(num_threads, /*pin=*/false, numel, [&](size_t b, size_t e) {
    strata::bench::PlainAdamFp32(params + b, grads + b, exp_avg + b, exp_avg_sq + b, e - b, pa);
  });
  return 0;
}

extern "C" const char* strata_capi_last_error(void) { return strata::bench::g_last_error.c_str(); }
