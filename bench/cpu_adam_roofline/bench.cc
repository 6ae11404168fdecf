#include "bench/cpu_adam_roofline/bench.h"

#include <oneapi/tbb/task_scheduler_observer.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "core/flags.h"

namespace strata::bench {

Args ParseArgs(int argc, char** argv) {
  Args a;
  FlagParser flags(
      "cpu_adam_roofline [--params N[K|M|G]] [--rounds R] [--json] [--no-tricks] [--no-ceiling] "
      "[--pages-compare] [--filter S]");
  flags.Bytes("params", &a.params, "parameters per array (>= 1024; K/M/G are powers of 1024)");
  flags.Int("rounds", &a.rounds, "measured rounds (medians over them)", 1, 100000);
  flags.Bool("json", &a.json, "print one JSON object instead of the table");
  flags.Bool("tricks", &a.tricks, "also measure prefetch distances, tile sizes and pinning");
  flags.Bool("ceiling", &a.ceiling, "also measure the other data-movement shapes of the probe");
  flags.Bool("pages-compare", &a.pages_compare, "also run on 4 KiB pages, staggered and aliased");
  flags.String("filter", &a.filter, "run only variants whose name contains this (and the probes)");
  std::vector<std::string> positional;
  Status s = flags.Parse(argc, argv, 1, &positional);
  if (s.ok() && !positional.empty()) {
    s = InvalidArgumentError("unexpected argument '" + positional[0] + "'");
  }
  if (s.ok() && a.params < 1024) {
    s = InvalidArgumentError("--params " + std::to_string(a.params) +
                             ": wants a count >= 1024, e.g. 256M");
  }
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    std::exit(0);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "cpu_adam_roofline: %s\n%s\n", s.message().c_str(), flags.Help().c_str());
    std::exit(2);
  }
  a.params = a.params / 64 * 64;
  return a;
}

// Pins each thread that enters the arena to CPU = its slot index; unpins on exit.
class PinningObserver : public tbb::task_scheduler_observer {
 public:
  explicit PinningObserver(tbb::task_arena& arena) : tbb::task_scheduler_observer(arena) {
    observe(true);
  }
  ~PinningObserver() override { observe(false); }
  void on_scheduler_entry(bool) override {
    PinCurrentThread(tbb::this_task_arena::current_thread_index());
  }
  void on_scheduler_exit(bool) override {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    sched_setaffinity(0, sizeof(all), &all);
  }
};

Bench::Bench(const Args& args) : args_(args) {
  const size_t n = args_.params;
  hp_.weight_decay = 0.01f;
  plain_ = MakePlainAdamArgs(hp_.lr, hp_.beta1, hp_.beta2, hp_.eps, hp_.weight_decay, kStep,
                             /*bias_correction=*/true);
  if (!args_.json) {
    // Bytes per param allocated: fp32 p, g, m, v + bf16 grads and copy (20), the ceiling shapes'
    // interleaved state (12), the --pages-compare buffer (16).
    const double total =
        n * (20.0 + (args_.ceiling ? 12 : 0) + (args_.pages_compare ? 16 : 0)) / (1 << 30);
    std::printf(
        "cpu_adam_roofline: %zu params (%.2f GiB of fp32 state+grads, %.2f GiB allocated), %d "
        "rounds + %d warm-up, %u CPUs, %s\n",
        n, n * 16.0 / (1 << 30), total, static_cast<int>(args_.rounds), args_.warmup,
        std::thread::hardware_concurrency(), CpuSimdFeatures().c_str());
    std::fflush(stdout);
  }
  huge_ = std::make_unique<Arrays>(n, true);
  // --pages-compare: one 4 KiB-page buffer viewed two ways: arrays staggered by 2 MiB each (page
  // size is the only difference from `huge_`), and arrays exactly n * 4 bytes apart (aliased).
  constexpr size_t kStagger = size_t{2} << 20;
  if (args_.pages_compare) {
    small_buf_ = Alloc(4 * (n * 4 + kStagger), false);
    // Every float is a valid p, g, m and v, whichever view reads it.
    float* all = reinterpret_cast<float*>(small_buf_.data());
    const size_t count = small_buf_.size() / 4;
    RunSplit(2, false, count, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) all[i] = 1e-4f * (1 + static_cast<float>(i % 97) / 97);
    });
    small_pages_ = std::make_unique<Arrays>(n, small_buf_, kStagger);
    aliased_ = std::make_unique<Arrays>(n, small_buf_, 0);
  }
  if (args_.ceiling) interleaved_state_ = Alloc(n * 12, true);
  huge_page_fraction_ = double(huge_->owned[0].HugePageBackedBytes()) / huge_->owned[0].size();
  AddVariants();
  ApplyFilter();
}

Bench::~Bench() = default;

const Variant* Bench::Get(VariantId id) const {
  if (id.index < 0) return nullptr;
  const Variant& v = variants_.at(id.index);
  return v.enabled ? &v : nullptr;
}

const Variant* Bench::PlainRefOf(const Variant& v) const {
  return v.plain_ref >= 0 ? Get({v.plain_ref}) : Get(handles_.plain_fp32[v.threads - 1]);
}

const Variant* Bench::ProbeOf(const Variant& v) const {
  const int t = v.threads - 1;
  return Get(v.mix == Mix::kFp32 ? handles_.probe_fp32[t] : handles_.probe_bf16[t]);
}

VariantId Bench::Push(Variant v) {
  v.group = group_;
  variants_.push_back(std::move(v));
  return {static_cast<int>(variants_.size()) - 1};
}

void Bench::PairGroupWith(VariantId twin) {
  for (size_t k = 0; k < variants_.size(); ++k) {
    if (variants_[k].group == group_ && static_cast<int>(k) != twin.index) {
      variants_[k].plain_ref = twin.index;
    }
  }
}

CpuOptimizer* Bench::MakeOptimizer(int threads, size_t tile, size_t prefetch) {
  CpuOptimizerOptions o;
  o.num_threads = threads;
  if (tile) o.tile_numel = tile;
  if (prefetch != SIZE_MAX) o.prefetch_bytes = prefetch;
  Result<CpuOptimizer> r = CpuOptimizer::Create(OptimizerKind::kAdam, o);
  STRATA_CHECK_MSG(r.ok(), r.status().ToString());
  optimizers_.push_back(std::make_unique<CpuOptimizer>(std::move(r).value()));
  return optimizers_.back().get();
}

VariantId Bench::AddProbe(const std::string& name, const Arrays& a, int threads, Mix mix) {
  const size_t n = args_.params;
  const bool half = mix == Mix::kBf16;
  return Push({name, mix, threads, [&a, n, threads, half] {
                 RunSplit(threads, false, n, [&](size_t b, size_t e) {
                   if (half) {
                     ProbeHalfMix(a.P() + b, a.G16() + b, a.M() + b, a.V() + b, a.C16() + b, e - b);
                   } else {
                     ProbeFp32(a.P() + b, a.G() + b, a.M() + b, a.V() + b, e - b);
                   }
                 });
               }});
}

// Other data-movement shapes for the fp32 probe (see streams.h); `state` is the interleaved
// [p|m|v] buffer (3 * n floats).
void Bench::AddCeilingShapes(const Arrays& a, float* state, int threads) {
  const size_t n = args_.params;
  auto add = [&](const std::string& name, std::function<void()> run) {
    handles_.ceiling_shapes.push_back(Push({name, Mix::kFp32, threads, std::move(run)}));
  };
  add("probe fp32 streaming stores", [&a, n, threads] {
    RunSplit(threads, false, n, [&](size_t b, size_t e) {
      ProbeFp32Streaming(a.P() + b, a.G() + b, a.M() + b, a.V() + b, e - b);
    });
  });
  add("probe fp32 tile prefetch", [&a, n, threads] {
    RunSplit(threads, false, n, [&](size_t b, size_t e) {
      ProbeFp32TilePrefetch(a.P() + b, a.G() + b, a.M() + b, a.V() + b, e - b);
    });
  });
  add("probe fp32 threads interleaved", [&a, n, threads] {
    RunInterleaved(threads, n, size_t{64} << 10, [&](size_t b, size_t e) {
      ProbeFp32(a.P() + b, a.G() + b, a.M() + b, a.V() + b, e - b);
    });
  });
  add("probe interleaved state", [&a, n, threads, state] {
    RunSplit(threads, false, n,
             [&](size_t b, size_t e) { ProbeInterleavedState(state + 3 * b, a.G() + b, e - b); });
  });
}

VariantId Bench::AddPlain(const std::string& name, const Arrays& a, int threads, bool pin) {
  const size_t n = args_.params;
  const PlainAdamArgs pa = plain_;
  return Push({name, Mix::kFp32, threads, [&a, n, threads, pin, pa] {
                 RunSplit(threads, pin, n, [&](size_t b, size_t e) {
                   PlainAdamFp32(a.P() + b, a.G() + b, a.M() + b, a.V() + b, e - b, pa);
                 });
               }});
}

VariantId Bench::AddStrata(const std::string& name, const Arrays& a, int threads, Mix mix,
                           size_t tile, size_t prefetch, bool pin) {
  CpuOptimizer* opt = MakeOptimizer(pin ? 0 : threads, tile, prefetch);
  tbb::task_arena* arena = nullptr;
  if (pin) {
    arenas_.push_back(std::make_unique<tbb::task_arena>(threads));
    arena = arenas_.back().get();
    arena->initialize();
    observers_.push_back(std::make_unique<PinningObserver>(*arena));
  }
  const bool half = mix == Mix::kBf16;
  StepTensors t;
  t.numel = args_.params;
  t.params = a.P();
  t.exp_avg = a.M();
  t.exp_avg_sq = a.V();
  t.grads = half ? static_cast<const void*>(a.G16()) : a.G();
  t.grad_dtype = half ? DType::kBFloat16 : DType::kFloat32;
  if (half) {
    t.param_copy = a.C16();
    t.param_copy_dtype = DType::kBFloat16;
  }
  const Hyperparams hp = hp_;
  return Push({name, mix, threads, [opt, arena, t, hp] {
                 auto step = [&] {
                   Status s = opt->StepAt(hp, kStep, t);
                   STRATA_CHECK_MSG(s.ok(), s.ToString());
                 };
                 if (arena) {
                   arena->execute(step);
                 } else {
                   step();
                 }
               }});
}

// Compared variants sit next to each other in a group (paired ratios); the groups' order is
// shuffled every round. Each group of tricks has its own plain-loop twin to compare with.
void Bench::AddVariants() {
  Handles& h = handles_;
  const Arrays& huge = *huge_;
  for (int t : {1, 2}) {
    NewGroup();
    h.probe_fp32[t - 1] = AddProbe("probe fp32", huge, t, Mix::kFp32);
    h.plain_fp32[t - 1] = AddPlain("plain loop fp32", huge, t, false);
    h.strata_fp32[t - 1] = AddStrata("strata fp32", huge, t, Mix::kFp32);
    if (t == 2 && args_.ceiling) {
      AddCeilingShapes(huge, static_cast<float*>(interleaved_state_.data()), 2);
    }
  }
  for (int t : {1, 2}) {
    NewGroup();
    h.probe_bf16[t - 1] = AddProbe("probe bf16 mix", huge, t, Mix::kBf16);
    h.strata_bf16[t - 1] = AddStrata("strata bf16 mix", huge, t, Mix::kBf16);
  }
  auto trick_group = [&](const std::string& what) {
    NewGroup();
    return AddPlain("plain loop fp32 (" + what + " pair)", huge, 2, false);
  };
  if (args_.tricks) {
    const VariantId pf_twin = trick_group("prefetch");
    for (size_t pf : {size_t{0}, size_t{256}, size_t{1024}, size_t{4096}}) {
      AddStrata("strata fp32 prefetch " + std::to_string(pf) + " B", huge, 2, Mix::kFp32, 0, pf);
    }
    PairGroupWith(pf_twin);
    const VariantId tile_twin = trick_group("tile");
    for (size_t tile :
         {size_t{4} << 10, size_t{16} << 10, size_t{256} << 10, size_t{1} << 20, size_t{4} << 20}) {
      AddStrata("strata fp32 tile " + std::to_string(tile >> 10) + "K", huge, 2, Mix::kFp32, tile);
    }
    PairGroupWith(tile_twin);
    const VariantId pin_twin = trick_group("pinning");
    AddPlain("plain loop fp32 pinned", huge, 2, true);
    AddStrata("strata fp32 pinned", huge, 2, Mix::kFp32, 0, SIZE_MAX, true);
    PairGroupWith(pin_twin);
  }
  if (small_pages_) {
    NewGroup();
    AddProbe("probe fp32 4K pages", *small_pages_, 2, Mix::kFp32);
    h.plain_4k = AddPlain("plain loop fp32 4K pages", *small_pages_, 2, false);
    h.strata_4k = AddStrata("strata fp32 4K pages", *small_pages_, 2, Mix::kFp32);
    AddProbe("probe fp32 4K aliased", *aliased_, 2, Mix::kFp32);
    h.strata_4k_aliased = AddStrata("strata fp32 4K aliased", *aliased_, 2, Mix::kFp32);
    PairGroupWith(h.plain_4k);
  }
}

// --filter keeps the probes, the variants whose name contains it, and their plain-loop twins.
void Bench::ApplyFilter() {
  if (args_.filter.empty()) return;
  auto wanted = [&](const Variant& v) {
    return v.name.rfind("probe ", 0) == 0 || v.name.find(args_.filter) != std::string::npos;
  };
  std::vector<bool> keep(variants_.size(), false);
  for (size_t k = 0; k < variants_.size(); ++k) {
    if (!wanted(variants_[k])) continue;
    keep[k] = true;
    if (variants_[k].plain_ref >= 0) keep[variants_[k].plain_ref] = true;
  }
  for (size_t k = 0; k < variants_.size(); ++k) variants_[k].enabled = keep[k];
}

}  // namespace strata::bench
