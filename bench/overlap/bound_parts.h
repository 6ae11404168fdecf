// The parts of bench/overlap's lower bound on a step, each measured alone in the same run
// (issue #15, "Benchmarks"): the model's forward + backward with every parameter resident on an
// unpaced device, the CPU Adam sub-group loop over the rank's partition, the host's memcpy speed
// (what a paced link copy costs the CPU on the host-emulated device) and the read / write speed
// Strata's own aio reaches on the swap directory's files with the step's block size.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aio/aio_options.h"
#include "core/status.h"
#include "cpu_adam/cpu_optimizer.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_model.h"
#include "nn/modules/lm/causal_lm.h"
#include "offload/device/api/device.h"

namespace strata::bench {

// Forward + backward of the Llama with all parameters and gradients resident on an unpaced,
// uncapped host-emulated device: the compute a step cannot avoid.
class ResidentCompute {
 public:
  static Result<std::unique_ptr<ResidentCompute>> Create(const llama::LlamaConfig& model,
                                                         DType dtype, uint64_t seed);
  ~ResidentCompute();
  // Seconds of one forward + backward (+ the loss read, which synchronizes).
  Result<double> Run(const nn::TokenBatch& batch);
  // The process's CPU seconds (every thread) during the last Run.
  double last_cpu_s() const { return last_cpu_s_; }
  // Of the last Run's seconds, the forward's (to its stream's synchronisation; the rest is the
  // backward's and the loss read's).
  double last_forward_s() const { return last_forward_s_; }

 private:
  ResidentCompute() = default;
  double last_cpu_s_ = 0;
  double last_forward_s_ = 0;
  std::unique_ptr<Device> device_;
  Stream stream_;
  std::unique_ptr<llama::LlamaForCausalLM> model_;
};

// CPU Adam over `numel` fp32 elements in sub-groups of `sub_group_numel`, as the engine steps
// its partition (master, gradient and both moments in RAM: the kernel without the I/O).
class AdamAlone {
 public:
  static Result<std::unique_ptr<AdamAlone>> Create(size_t numel, size_t sub_group_numel);
  // Seconds of one step over all sub-groups.
  Result<double> Run();
  // The process's CPU seconds (every thread) during the last Run.
  double last_cpu_s() const { return last_cpu_s_; }

 private:
  AdamAlone(CpuOptimizer opt) : opt_(std::move(opt)) {}
  CpuOptimizer opt_;
  size_t numel_ = 0, sub_group_numel_ = 0;
  std::vector<float> params_, grads_, m_, v_;
  int64_t step_ = 0;
  double last_cpu_s_ = 0;
};

// CPU seconds this process has used so far, all threads, user + system
// (CLOCK_PROCESS_CPUTIME_ID): what a part of the run cost the cores, spinning and the kernel's
// I/O path included.
double ProcessCpuSeconds();

// CPU seconds (user + system) of each of this process's live threads, by thread id, with the
// thread's name (/proc/self/task/*/stat and comm); the process's first thread is named "main".
struct ThreadCpu {
  std::string name;
  double cpu_s = 0;
  double switches = 0;  // context switches: voluntary (it blocked) + involuntary (preempted)
};
std::map<int, ThreadCpu> ThreadCpuSeconds();

// The CPU seconds and context switches of each thread name between two ThreadCpuSeconds()
// snapshots (threads started in between count from zero), summed over the threads that share a
// name.
std::map<std::string, ThreadCpu> ThreadCpuDelta(const std::map<int, ThreadCpu>& before,
                                                const std::map<int, ThreadCpu>& after);
// Adds each name's CPU seconds and switches in `delta` to `sum`'s.
void AddThreadCpu(const std::map<std::string, ThreadCpu>& delta,
                  std::map<std::string, ThreadCpu>* sum);

// GB/s (1e9 B/s) of a single-thread copy between two fresh-touched 64 MiB buffers, through the
// host device's own link copy (offload/device/host/streaming_copy.h: streaming stores, as glibc's
// memcpy uses at this size).
double MeasureMemcpyGbps();

// GB/s (1e9 B/s) of the swap's checksum (swap/swap_space.h SwapSpace::BlockChecksum, XXH3-64 per
// 1 MiB block) on one thread over a fresh-touched 64 MiB buffer: what swap_checksums costs the
// CPU per byte the step reads from or writes to NVMe (each such byte is hashed once).
double MeasureChecksumGbps();

struct AioSpeed {
  double read_gbps = 0;
  double write_gbps = 0;
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  int files = 0;
  std::string engine;  // AioHandle::Describe()
};

// Reads every regular file under `dir` (recursively), its written extents only (not the space a
// fallocate reserved and nothing wrote: Note [Only the written extents]), in `request_bytes`
// requests through an
// AioHandle with `options`, then writes a scratch file of min(read bytes, max_write_bytes) in the
// same directory with the same requests twice and times the second pass (an overwrite, as the
// swap's writes are: Note [Overwrite sweep]), and removes it. NotFound when `dir` has no files.
// With `load` (a diagnostic, not part of the bound): the load runs over and over on a thread of
// its own for the whole sweep (Note [A loaded sweep] in bound_parts.cc).
// kInPlace: the write pass overwrites the files it read (up to max_write_bytes), timed once, with
// no scratch file: their contents are lost (Note [A sustained sweep] in bound_parts.cc).
enum class SweepWrites { kScratch, kInPlace };
Result<AioSpeed> MeasureAioSweep(const std::string& dir, const AioOptions& options,
                                 size_t request_bytes, uint64_t max_write_bytes,
                                 const std::function<Status()>& load = {},
                                 SweepWrites writes = SweepWrites::kScratch);

// Threads that only spin, at SCHED_IDLE, for as long as the object lives (Note [A sweep beside idle
// spinners] in bound_parts.cc): what a busy core costs the disk when nothing of the work competes
// with the I/O path for this machine's scheduler.
class IdleSpinners {
 public:
  explicit IdleSpinners(int threads);
  ~IdleSpinners();
  IdleSpinners(const IdleSpinners&) = delete;
  IdleSpinners& operator=(const IdleSpinners&) = delete;
  // How many of the threads run at SCHED_IDLE (once each has started; the others, refused the
  // policy, spin at the default one).
  int idle_threads() const;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0}, idle_{0};
  std::vector<std::thread> threads_;
};

}  // namespace strata::bench
