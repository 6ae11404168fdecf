// cpu_adam_roofline's set-up: its flags, the arrays, and every variant it measures, registered with
// typed handles. The analysis (main.cc) reaches each variant it compares through a VariantId
// handed out here, never by display name, so renaming a variant cannot silently turn a figure
// into NaN; a figure is absent (NaN) only when --filter left its variant out.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aio/direct/aligned_buffer.h"
#include "bench/cpu_adam_roofline/arrays.h"
#include "bench/cpu_adam_roofline/measure.h"
#include "bench/cpu_adam_roofline/streams.h"
#include "cpu_adam/cpu_optimizer.h"

namespace strata::bench {

// Both mixes move 28 bytes per parameter: fp32 16 read + 12 written; bf16 14 + 14.
inline constexpr double kBytesPerParam = 28;

struct Args {
  uint64_t params = uint64_t{256} << 20;  // rounded down to a multiple of 64
  int64_t rounds = 9;
  int warmup = 1;
  bool json = false;
  bool tricks = true;
  bool pages_compare = false;
  bool ceiling = true;
  std::string filter;  // run only variants whose name contains this (plus the probes)
};

// Parses the command line with core/flags.h; prints the help (exit 0) or the error and the help
// (exit 2) and exits.
Args ParseArgs(int argc, char** argv);

// A variant's place in Bench::variants(), handed out when it is registered.
struct VariantId {
  int index = -1;
};

// The variants the analysis reads. [0] = 1 thread, [1] = 2 threads.
struct Handles {
  VariantId probe_fp32[2], plain_fp32[2], strata_fp32[2];
  VariantId probe_bf16[2], strata_bf16[2];
  std::vector<VariantId> ceiling_shapes;  // 2 threads, --no-ceiling: none
  // --pages-compare only.
  VariantId plain_4k, strata_4k, strata_4k_aliased;
};

class PinningObserver;

class Bench {
 public:
  // Allocates and touches the arrays, registers every variant the flags ask for and applies
  // --filter. Prints the header line first unless --json.
  explicit Bench(const Args& args);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  static constexpr int64_t kStep = 10;
  static constexpr unsigned kOrderSeed = 1;

  const Args& args() const { return args_; }
  std::vector<Variant>& variants() { return variants_; }
  const std::vector<Variant>& variants() const { return variants_; }
  const Handles& handles() const { return handles_; }

  // The variant, or null if it does not exist (e.g. --no-ceiling) or --filter left it out.
  const Variant* Get(VariantId id) const;
  // The plain loop `v`'s "vs plain" ratio pairs with: its twin, else the plain loop of its thread
  // count.
  const Variant* PlainRefOf(const Variant& v) const;
  // The probe of `v`'s mix and thread count.
  const Variant* ProbeOf(const Variant& v) const;

  // The kernel the first Strata variant runs (e.g. "avx2").
  const char* kernel_name() const { return optimizers_.front()->kernel_name(); }
  double huge_page_fraction() const { return huge_page_fraction_; }
  size_t common_alignment() const { return huge_->CommonAlignment(); }

 private:
  VariantId Push(Variant v);
  void NewGroup() { ++group_; }
  // Sets every variant of the current group except `twin` to pair its "vs plain" with `twin`.
  void PairGroupWith(VariantId twin);
  CpuOptimizer* MakeOptimizer(int threads, size_t tile, size_t prefetch);
  VariantId AddProbe(const std::string& name, const Arrays& a, int threads, Mix mix);
  void AddCeilingShapes(const Arrays& a, float* state, int threads);
  VariantId AddPlain(const std::string& name, const Arrays& a, int threads, bool pin);
  // tile 0 / prefetch SIZE_MAX: the library defaults. pin: run in a pinned arena of `threads`.
  VariantId AddStrata(const std::string& name, const Arrays& a, int threads, Mix mix,
                      size_t tile = 0, size_t prefetch = SIZE_MAX, bool pin = false);
  void AddVariants();
  void ApplyFilter();

  const Args args_;
  Hyperparams hp_;
  PlainAdamArgs plain_{};
  std::vector<Variant> variants_;
  Handles handles_;
  int group_ = 0;  // the group new variants join (see MeasureInterleaved)

  std::unique_ptr<Arrays> huge_;
  // --pages-compare: one 4 KiB-page buffer viewed two ways (see AddVariants).
  AlignedBuffer small_buf_;
  std::unique_ptr<Arrays> small_pages_, aliased_;
  AlignedBuffer interleaved_state_;  // the ceiling shapes' [p|m|v] blocks
  double huge_page_fraction_ = 0;

  std::vector<std::unique_ptr<CpuOptimizer>> optimizers_;
  std::vector<std::unique_ptr<tbb::task_arena>> arenas_;
  std::vector<std::unique_ptr<PinningObserver>> observers_;
};

}  // namespace strata::bench
