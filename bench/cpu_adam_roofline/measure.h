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

struct Variant {
  std::string name;
  std::string mix;  // "fp32" or "bf16" (bf16 grads + fused bf16 copy-out)
  int threads = 1;
  std::function<void()> run;
  std::vector<double> seconds;  // one per measured round
};

// `warmup` unmeasured rounds, then `rounds` measured ones; order alternates every round.
void MeasureInterleaved(std::vector<Variant>& variants, int rounds, int warmup);

double Median(std::vector<double> v);

// Median over rounds of reference.seconds[r] / v.seconds[r]: v's throughput relative to the
// reference measured in the same round (drifts in machine load cancel out).
double PairedRatio(const Variant& v, const Variant& reference);

// The same over the rounds whose index has the given parity (0: even, 1: odd), so that one half
// of the rounds can pick the best of several variants and the other half measure it unbiased.
double PairedRatioOn(const Variant& v, const Variant& reference, int parity);

}  // namespace strata::bench
