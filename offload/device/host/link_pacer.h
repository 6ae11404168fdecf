// LinkPacer: emulates one direction of a host<->device link (e.g. PCIe H2D) of fixed bandwidth.
//
// Copies are not slowed down; they run at memcpy speed and the stream then sleeps until the time
// the bytes would have needed on the link (pacing). Copies from all streams sharing a direction
// are serialised on the link in reservation order, so two concurrent H2D streams each see about
// half the bandwidth, while H2D and D2H proceed in parallel (full duplex), as on PCIe.
//
// See Note [Pacing without drift]. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>

namespace strata::internal {

using Clock = std::chrono::steady_clock;

// Note [Pacing without drift]
// A stream that sleeps until a copy's end time wakes up a little late (tens of microseconds). If
// the next copy then started "now", every copy would lose that oversleep and the achieved
// bandwidth would fall short of the configured one. So the emulated start of a copy is
//   max(time the op was enqueued, emulated end of the stream's previous op, link free time)
// — the time a real DMA engine would have started it — rather than the wake-up time. The
// oversleep is therefore not accumulated, and a burst of copies achieves the set bandwidth.
// The stream's previous op ends at its emulated end if it was a paced copy, and at its real end
// if it was a kernel, a host function or a wait that blocked for another stream's event: a copy
// queued behind a wait cannot start before the event fires. (Until 2026-11-24 only a copy's end
// counted, so a copy behind a wait or a kernel was paced from its enqueue time and a long wait
// hid its link time: the overlapped step's gradient D2H, queued during backward behind the
// reduce stream's event, crossed the link for free.)
class LinkPacer {
 public:
  // bandwidth_gbps in GB/s (1e9 bytes per second); <= 0 means unthrottled.
  explicit LinkPacer(double bandwidth_gbps) : bandwidth_gbps_(bandwidth_gbps) {}

  bool throttled() const { return bandwidth_gbps_ > 0; }
  double bandwidth_gbps() const { return bandwidth_gbps_; }

  // Reserves the link for `size_bytes` starting no earlier than `earliest`; returns when the
  // transfer would end.
  Clock::time_point Reserve(Clock::time_point earliest, size_t size_bytes) {
    const auto duration = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(static_cast<double>(size_bytes) / (bandwidth_gbps_ * 1e9)));
    std::lock_guard lock(mu_);
    const Clock::time_point start = earliest > link_free_ ? earliest : link_free_;
    link_free_ = start + duration;
    return link_free_;
  }

 private:
  const double bandwidth_gbps_;
  std::mutex mu_;
  Clock::time_point link_free_{};
};

}  // namespace strata::internal
