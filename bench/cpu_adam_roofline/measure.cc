#include "bench/cpu_adam_roofline/measure.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

namespace strata::bench {

bool PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

void RunSplit(int threads, bool pin, size_t n, const std::function<void(size_t, size_t)>& fn) {
  auto chunk = [&](int t) {
    size_t begin = n * t / threads / 64 * 64;
    size_t end = t + 1 == threads ? n : n * (t + 1) / threads / 64 * 64;
    return std::pair<size_t, size_t>(begin, end);
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) {
    workers.emplace_back([&, t] {
      if (pin) PinCurrentThread(t);
      auto [b, e] = chunk(t);
      fn(b, e);
    });
  }
  cpu_set_t saved;
  if (pin) {
    pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved);
    PinCurrentThread(0);
  }
  auto [b, e] = chunk(0);
  fn(b, e);
  for (auto& w : workers) w.join();
  if (pin) pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
}

void RunInterleaved(int threads, size_t n, size_t tile_numel,
                    const std::function<void(size_t, size_t)>& fn) {
  auto work = [&](int t) {
    for (size_t b = t * tile_numel; b < n; b += threads * tile_numel) {
      fn(b, std::min(n, b + tile_numel));
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(work, t);
  work(0);
  for (auto& w : workers) w.join();
}

void MeasureInterleaved(std::vector<Variant>& variants, int rounds, int warmup, unsigned seed) {
  std::vector<int> groups;
  for (const Variant& v : variants) {
    if (v.enabled && std::find(groups.begin(), groups.end(), v.group) == groups.end()) {
      groups.push_back(v.group);
    }
  }
  std::mt19937 rng(seed);
  for (int r = 0; r < warmup + rounds; ++r) {
    std::shuffle(groups.begin(), groups.end(), rng);
    const bool reverse = r % 2 == 1;
    for (int g : groups) {
      for (size_t k = 0; k < variants.size(); ++k) {
        Variant& v = variants[reverse ? variants.size() - 1 - k : k];
        if (v.group != g || !v.enabled) continue;
        const auto t0 = std::chrono::steady_clock::now();
        v.run();
        const auto t1 = std::chrono::steady_clock::now();
        if (r >= warmup) v.seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
      }
    }
  }
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

double PairedRatio(const Variant& v, const Variant& reference, int parity) {
  std::vector<double> r;
  for (size_t i = 0; i < v.seconds.size() && i < reference.seconds.size(); ++i) {
    if (parity < 0 || static_cast<int>(i % 2) == parity) {
      r.push_back(reference.seconds[i] / v.seconds[i]);
    }
  }
  return Median(std::move(r));
}

}  // namespace strata::bench
