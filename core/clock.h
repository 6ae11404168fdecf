// The steady clock as plain numbers, for the step's accounting and the aio worker's latencies:
// one definition instead of a file-local copy per .cc (which a unity build needs each to name
// differently).
#pragma once

#include <chrono>
#include <cstdint>

namespace strata {

// Milliseconds of the steady clock (an arbitrary epoch: only differences mean anything).
inline double SteadyNowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Nanoseconds of the same clock.
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace strata
