#include "cpu_adam/cpu_optimizer.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>

#include "core/log.h"
#include "core/trace.h"
#include "cpu_adam/simd/kernel_table.h"

namespace strata {

struct CpuOptimizer::Arena {
  explicit Arena(int n) : arena(n) {}
  tbb::task_arena arena;
};

namespace {

const internal::KernelTable* TableFor(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kAvx512:
      return CpuHasAvx512Bf16() ? &internal::Avx512Bf16Kernels() : &internal::Avx512Kernels();
    case SimdIsa::kAvx2:
      return &internal::Avx2Kernels();
    default:
      return &internal::ScalarKernels();
  }
}

struct Span {
  const char* name;
  uintptr_t begin;
  uintptr_t end;
};

Status CheckTensors(OptimizerKind kind, const StepTensors& t) {
  if (t.params == nullptr) return InvalidArgumentError("params is null");
  if (t.grads == nullptr) return InvalidArgumentError("grads is null");
  const bool wants_m = kind != OptimizerKind::kAdagrad;
  const bool wants_v = kind != OptimizerKind::kLion;
  const std::string name(OptimizerKindName(kind));
  if (wants_m && t.exp_avg == nullptr)
    return InvalidArgumentError("exp_avg is null (" + name + " needs it)");
  if (wants_v && t.exp_avg_sq == nullptr) {
    return InvalidArgumentError("exp_avg_sq is null (" + name + " needs it)");
  }
  auto valid = [](DType d) {
    return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
  };
  if (!valid(t.grad_dtype)) {
    return InvalidArgumentError("grad_dtype " + std::to_string(static_cast<int>(t.grad_dtype)) +
                                " (allowed: fp32, fp16, bf16)");
  }
  if (t.param_copy != nullptr && !valid(t.param_copy_dtype)) {
    return InvalidArgumentError("param_copy_dtype " +
                                std::to_string(static_cast<int>(t.param_copy_dtype)) +
                                " (allowed: fp32, fp16, bf16)");
  }
  Span spans[5];
  int n = 0;
  auto add = [&](const char* what, const void* p, size_t elem_bytes) -> Status {
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (a % elem_bytes != 0) {
      return InvalidArgumentError(std::string(what) + " is not aligned to its element size (" +
                                  std::to_string(elem_bytes) + " bytes)");
    }
    spans[n++] = {what, a, a + t.numel * elem_bytes};
    return Status::Ok();
  };
  STRATA_RETURN_IF_ERROR(add("params", t.params, 4));
  STRATA_RETURN_IF_ERROR(add("grads", t.grads, DTypeBytes(t.grad_dtype)));
  if (wants_m) STRATA_RETURN_IF_ERROR(add("exp_avg", t.exp_avg, 4));
  if (wants_v) STRATA_RETURN_IF_ERROR(add("exp_avg_sq", t.exp_avg_sq, 4));
  if (t.param_copy != nullptr) {
    STRATA_RETURN_IF_ERROR(add("param_copy", t.param_copy, DTypeBytes(t.param_copy_dtype)));
  }
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (spans[i].begin < spans[j].end && spans[j].begin < spans[i].end) {
        return InvalidArgumentError(std::string(spans[i].name) + " and " + spans[j].name +
                                    " overlap (all arrays must be distinct)");
      }
    }
  }
  return Status::Ok();
}

// Note [Aliased streams]
// On the development machine (Zen 3 under KVM) Adam's streams run ~5x slower when the arrays are
// separated by a multiple of 128 MiB or more (e.g. equal power-of-two-sized arrays carved back to
// back from one buffer): every stream then maps to the same DRAM banks and rows. A multiple of
// 32 MiB cost ~8%, 8 MiB or less nothing measurable (bench/cpu_adam_roofline --pages-compare,
// docs/cpu_adam.md). The fix is the caller's (stagger the arrays by a few MiB), so the step only
// says so, once per process.
std::atomic<bool> g_alias_warned{false};
constexpr uintptr_t kAliasModulus = uintptr_t{32} << 20;

void WarnIfStreamsAlias(const StepTensors& t) {
  if (t.numel * sizeof(float) < kAliasModulus || g_alias_warned.load(std::memory_order_relaxed)) {
    return;
  }
  const std::pair<const char*, const void*> streams[] = {{"params", t.params},
                                                         {"grads", t.grads},
                                                         {"exp_avg", t.exp_avg},
                                                         {"exp_avg_sq", t.exp_avg_sq}};
  for (size_t i = 0; i < std::size(streams); ++i) {
    for (size_t j = i + 1; j < std::size(streams); ++j) {
      if (streams[i].second == nullptr || streams[j].second == nullptr) continue;
      const auto a = reinterpret_cast<uintptr_t>(streams[i].second);
      const auto b = reinterpret_cast<uintptr_t>(streams[j].second);
      if ((a - b) % kAliasModulus == 0) {
        LogOnce(g_alias_warned, LogLevel::kWarning,
                std::string("cpu optimizer: ") + streams[i].first + " and " + streams[j].first +
                    " are a multiple of 32 MiB apart; such aliased streams ran up to 5x slower "
                    "here (stagger the arrays by a few MiB, see docs/cpu_adam.md)");
        return;
      }
    }
  }
}

internal::StepCoeffs MakeCoeffs(OptimizerKind kind, const Hyperparams& hp, int64_t step,
                                float grad_scale, size_t prefetch_bytes) {
  const double lr = hp.lr, b1 = hp.beta1, b2 = hp.beta2, wd = hp.weight_decay;
  internal::StepCoeffs c;
  c.lr = hp.lr;
  c.beta1 = hp.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - b1);
  c.beta2 = hp.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - b2);
  c.eps = hp.eps;
  c.grad_scale = grad_scale;
  c.prefetch_bytes = prefetch_bytes;
  switch (kind) {
    case OptimizerKind::kAdam: {
      const double t = static_cast<double>(step);
      const double bc1 = hp.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
      const double bc2 = hp.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
      c.step_size = static_cast<float>(lr / bc1);
      c.bc2_rsqrt = static_cast<float>(1.0 / std::sqrt(bc2));
      c.l2_decay = hp.adam_w_mode ? 0.0f : hp.weight_decay;
      c.decoupled_decay = hp.adam_w_mode ? static_cast<float>(1.0 - lr * wd) : 1.0f;
      break;
    }
    case OptimizerKind::kAdagrad:
      c.l2_decay = hp.weight_decay;
      break;
    case OptimizerKind::kLion:
      c.decoupled_decay = static_cast<float>(1.0 - lr * wd);
      break;
  }
  return c;
}

// Note [Adam worker tracks]
// With a current tracer (core/trace.h), each chunk of tiles a thread runs is one span "adam
// chunk" (elements, tiles) on the logical track "adam worker <slot>", slot = the thread's index
// in the oneTBB arena running the step (0 for the caller), so the caller's chunks show apart from
// its own spans and each slot's chunks never overlap. Two optimizers stepping at once in
// different arenas share the slot tracks. The tracer is loaded once per step: tracing off costs
// one relaxed load per step and one branch per chunk.
void TraceChunk(Tracer& tracer, double begin_us, size_t tiles, size_t numel) {
  const int slot = std::max(0, tbb::this_task_arena::current_thread_index());
  thread_local uint64_t cached_tracer = 0;
  thread_local int cached_slot = -1;
  thread_local int cached_track = 0;
  if (cached_tracer != tracer.id() || cached_slot != slot) {
    cached_track = tracer.Track("adam worker " + std::to_string(slot));
    cached_tracer = tracer.id();
    cached_slot = slot;
  }
  const TraceArg args[] = {{"elements", static_cast<double>(numel)},
                           {"tiles", static_cast<double>(tiles)}};
  tracer.Complete(cached_track, "adam chunk", "adam", begin_us, tracer.NowUs(), args);
}

}  // namespace

Result<CpuOptimizer> CpuOptimizer::Create(OptimizerKind kind, const CpuOptimizerOptions& options) {
  if (options.tile_numel == 0 || options.tile_numel % 64 != 0) {
    return InvalidArgumentError(
        "cpu optimizer: tile_numel = " + std::to_string(options.tile_numel) +
        " (allowed: a positive multiple of 64)");
  }
  if (options.num_threads < 0) {
    return InvalidArgumentError(
        "cpu optimizer: num_threads = " + std::to_string(options.num_threads) +
        " (allowed: 0 = caller's arena, or > 0)");
  }
  Result<SimdIsa> isa = ResolveSimdIsa(options.isa);
  if (!isa.ok()) return isa.status().WithContext("cpu optimizer");
  return CpuOptimizer(kind, options, *isa, TableFor(*isa));
}

CpuOptimizer::CpuOptimizer(OptimizerKind kind, const CpuOptimizerOptions& options, SimdIsa isa,
                           const internal::KernelTable* table)
    : kind_(kind), options_(options), isa_(isa), table_(table) {
  if (options.num_threads > 0) arena_ = std::make_unique<Arena>(options.num_threads);
}

CpuOptimizer::CpuOptimizer(CpuOptimizer&&) noexcept = default;
CpuOptimizer& CpuOptimizer::operator=(CpuOptimizer&&) noexcept = default;
CpuOptimizer::~CpuOptimizer() = default;

const char* CpuOptimizer::kernel_name() const { return table_->name; }

Status CpuOptimizer::CheckGroup(int group) const {
  if (group < 0 || group >= num_groups()) {
    return InvalidArgumentError("parameter group " + std::to_string(group) + " does not exist (" +
                                std::to_string(num_groups()) + " groups)");
  }
  return Status::Ok();
}

Result<int> CpuOptimizer::AddGroup(const Hyperparams& hp) {
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(kind_, hp));
  groups_.push_back(Group{hp, 0});
  return num_groups() - 1;
}

Status CpuOptimizer::SetHyperparams(int group, const Hyperparams& hp) {
  STRATA_RETURN_IF_ERROR(CheckGroup(group));
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(kind_, hp));
  groups_[group].hp = hp;
  return Status::Ok();
}

Status CpuOptimizer::SetLearningRate(int group, float lr) {
  STRATA_RETURN_IF_ERROR(CheckGroup(group));
  Hyperparams hp = groups_[group].hp;
  hp.lr = lr;
  return SetHyperparams(group, hp);
}

Result<Hyperparams> CpuOptimizer::hyperparams(int group) const {
  STRATA_RETURN_IF_ERROR(CheckGroup(group));
  return groups_[group].hp;
}

Result<int64_t> CpuOptimizer::step_count(int group) const {
  STRATA_RETURN_IF_ERROR(CheckGroup(group));
  return groups_[group].steps;
}

Status CpuOptimizer::SetStepCount(int group, int64_t steps) {
  STRATA_RETURN_IF_ERROR(CheckGroup(group));
  if (steps < 0) {
    return InvalidArgumentError("step count " + std::to_string(steps) + " (allowed: >= 0)");
  }
  groups_[group].steps = steps;
  return Status::Ok();
}

Status CpuOptimizer::Step(int group, const StepTensors& t, const StepOptions& options) {
  STRATA_RETURN_IF_ERROR(CheckGroup(group));
  Group& g = groups_[group];
  STRATA_RETURN_IF_ERROR(
      StepAt(g.hp, g.steps + 1, t, options).WithContext("group " + std::to_string(group)));
  ++g.steps;
  return Status::Ok();
}

Status CpuOptimizer::StepAt(const Hyperparams& hp, int64_t step, const StepTensors& t,
                            const StepOptions& options) const {
  const std::string ctx = std::string(OptimizerKindName(kind_)) + " step";
  if (step < 1) {
    return InvalidArgumentError(ctx + ": step number " + std::to_string(step) + " (allowed: >= 1)");
  }
  if (!std::isfinite(options.grad_scale) || !(options.grad_scale > 0.0f)) {
    return InvalidArgumentError(ctx + ": grad_scale = " + std::to_string(options.grad_scale) +
                                " (allowed: finite, > 0)");
  }
  STRATA_RETURN_IF_ERROR(ValidateHyperparams(kind_, hp).WithContext(ctx));
  if (t.numel == 0) return Status::Ok();
  STRATA_RETURN_IF_ERROR(CheckTensors(kind_, t).WithContext(ctx));
  WarnIfStreamsAlias(t);

  const internal::StepCoeffs coeffs =
      MakeCoeffs(kind_, hp, step, options.grad_scale, options_.prefetch_bytes);
  const int gi = static_cast<int>(t.grad_dtype);
  internal::ParamCopy copy_kind = internal::ParamCopy::kNone;
  if (t.param_copy != nullptr) {
    copy_kind = t.param_copy_dtype == DType::kFloat16    ? internal::ParamCopy::kFloat16
                : t.param_copy_dtype == DType::kBFloat16 ? internal::ParamCopy::kBFloat16
                                                         : internal::ParamCopy::kFloat32;
  }
  const int ci = static_cast<int>(copy_kind);
  internal::TileFn fn = nullptr;
  switch (kind_) {
    case OptimizerKind::kAdam:
      fn = table_->adam[gi][ci];
      break;
    case OptimizerKind::kAdagrad:
      fn = table_->adagrad[gi][ci];
      break;
    case OptimizerKind::kLion:
      fn = table_->lion[gi][ci];
      break;
  }
  STRATA_CHECK(fn != nullptr);
  internal::KernelArgs args;
  args.params = t.params;
  args.grads = t.grads;
  args.state1 = t.exp_avg;
  args.state2 = t.exp_avg_sq;
  args.copy = t.param_copy;

  const size_t tile = options_.tile_numel;
  const size_t num_tiles = (t.numel + tile - 1) / tile;
  const TileDoneFn& done = options.on_tile_done;
  Tracer* const tracer = CurrentTracer();  // Note [Adam worker tracks]
  auto run_tiles = [&](size_t first, size_t last) {
    const double begin_us = tracer != nullptr ? tracer->NowUs() : 0.0;
    size_t numel = 0;
    for (size_t i = first; i < last; ++i) {
      const size_t begin = i * tile;
      const size_t end = begin + tile < t.numel ? begin + tile : t.numel;
      fn(coeffs, args, begin, end);
      if (done) done(begin, end);
      numel += end - begin;
    }
    if (tracer != nullptr) TraceChunk(*tracer, begin_us, last - first, numel);
  };
  if (num_tiles == 1) {
    run_tiles(0, 1);
    return Status::Ok();
  }
  // One task per tile: simple_partitioner with grain 1 splits the tile range recursively, so each
  // thread walks a contiguous run of tiles and steals halves of the remainder when it runs dry.
  auto parallel = [&] {
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, num_tiles, 1),
        [&](const tbb::blocked_range<size_t>& r) { run_tiles(r.begin(), r.end()); },
        tbb::simple_partitioner());
  };
  if (arena_) {
    arena_->arena.execute(parallel);
  } else {
    parallel();
  }
  return Status::Ok();
}

}  // namespace strata
