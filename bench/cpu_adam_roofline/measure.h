// Measurement helpers for cpu_adam_roofline: split a range over pinned or free threads, and time
// many variants interleaved (forward, then reverse order each round: ABBA) reporting medians.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace strata::bench {

// Pins the calling thread to one CPU (best effort; false if the kernel refused).
bool PinCurrentThread(int cpu);

// Runs fn(begin, end) on `threads` contiguous chunks of [0, n) (boundaries multiples of 64), one
// per thread; the caller's thread takes chunk 0. With `pin`, thread t runs on CPU t.
void RunSplit(int threads, bool pin, size_t n, const std::function<void(size_t, size_t)>& fn);

// Like RunSplit, but thread t takes tiles t, t + threads, t + 2 * threads, ... of `tile_numel`
// elements: the threads stream through neighbouring addresses instead of separate halves.
void RunInterleaved(int threads, size_t n, size_t tile_numel,
                    const std::function<void(size_t, size_t)>& fn);

// Which bytes a variant moves: fp32 grads, or bf16 grads + a fused bf16 copy-out.
enum class Mix { kFp32, kBf16 };

struct Variant {
  std::string name;  // display only: nothing looks a variant up by its name
  Mix mix = Mix::kFp32;
  int threads = 1;
  std::function<void()> run;
  std::vector<double> seconds;  // one per measured round
  // Variants of one group always run back to back; compare only within a group (see below).
  int group = 0;
  // Index (in the same vector) of the plain-loop twin its "vs plain" ratio pairs with, a
  // neighbour in the same group; -1: the default plain loop of its thread count.
  int plain_ref = -1;
  // False when --filter left it out: not run, and comparisons with it are absent (NaN).
  bool enabled = true;
};

// `warmup` unmeasured rounds, then `rounds` measured ones, of the enabled variants. Each round runs
// the groups in an order shuffled afresh (seeded: reproducible), and each group's members forward
// in even rounds and backward in odd ones. Memory bandwidth on a shared VM moves in phases of
// seconds, so a fixed order would bias variants by their place in the round; shuffling groups turns
// that bias into noise, and keeping a group together keeps its members' paired ratios tight.
void MeasureInterleaved(std::vector<Variant>& variants, int rounds, int warmup, unsigned seed);

double Median(std::vector<double> v);

// Median over rounds of reference.seconds[r] / v.seconds[r]: v's throughput relative to the
// reference measured in the same round (drifts in machine load cancel out). With `parity` 0 or 1,
// only the even or odd rounds, so that one half can pick the best of several variants and the
// other half measure it unbiased.
double PairedRatio(const Variant& v, const Variant& reference, int parity = -1);

}  // namespace strata::bench
