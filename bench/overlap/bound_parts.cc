#include "bench/overlap/bound_parts.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "aio/aio_handle.h"
#include "aio/direct/aligned_buffer.h"
#include "offload/device/host/streaming_copy.h"
#include "offload/device/registry.h"
#include "swap/swap_space.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Result<std::unique_ptr<ResidentCompute>> ResidentCompute::Create(const llama::LlamaConfig& model,
                                                                 DType dtype, uint64_t seed) {
  std::unique_ptr<ResidentCompute> r(new ResidentCompute());
  DeviceOptions dev;
  // Parameters and fp32 gradients, plus room for activations (the arena maps lazily).
  dev.host.memory_bytes = static_cast<size_t>(model.NumParameters()) * 8 + (size_t{8} << 30);
  dev.host.populate_memory = false;
  STRATA_ASSIGN_OR_RETURN(r->device_, CreateDevice(dev));
  STRATA_ASSIGN_OR_RETURN(r->stream_, r->device_->CreateStream());
  llama::LlamaModelOptions mo;
  mo.dtype = dtype;
  mo.seed = seed;
  STRATA_ASSIGN_OR_RETURN(r->model_, llama::LlamaForCausalLM::Create(model, r->device_.get(), mo));
  return r;
}

ResidentCompute::~ResidentCompute() {
  model_.reset();
  if (stream_.valid()) device_->DestroyStream(stream_).IgnoreError();
}

Result<double> ResidentCompute::Run(const nn::TokenBatch& batch) {
  const nn::RunContext ctx{device_.get(), stream_, true};
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = Clock::now();
  STRATA_RETURN_IF_ERROR(model_->Forward(ctx, batch));
  STRATA_RETURN_IF_ERROR(stream_.Synchronize());
  last_forward_s_ = Since(t0);
  STRATA_RETURN_IF_ERROR(model_->Backward(ctx, 1.0f));
  STRATA_RETURN_IF_ERROR(model_->ReadLoss(ctx).status());
  const double wall = Since(t0);
  last_cpu_s_ = ProcessCpuSeconds() - cpu0;
  return wall;
}

Result<std::unique_ptr<AdamAlone>> AdamAlone::Create(size_t numel, size_t sub_group_numel) {
  STRATA_ASSIGN_OR_RETURN(CpuOptimizer opt, CpuOptimizer::Create(OptimizerKind::kAdam));
  std::unique_ptr<AdamAlone> a(new AdamAlone(std::move(opt)));
  a->numel_ = numel;
  a->sub_group_numel_ = std::max<size_t>(1, std::min(sub_group_numel, numel));
  a->params_.assign(numel, 0.01f);
  a->grads_.assign(numel, 0.001f);
  a->m_.assign(numel, 0.0f);
  a->v_.assign(numel, 0.0f);
  return a;
}

Result<double> AdamAlone::Run() {
  Hyperparams hp;
  hp.lr = 1e-4f;
  hp.adam_w_mode = true;
  hp.weight_decay = 0.01f;
  ++step_;
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = Clock::now();
  for (size_t b = 0; b < numel_; b += sub_group_numel_) {
    StepTensors t;
    t.numel = std::min(sub_group_numel_, numel_ - b);
    t.params = params_.data() + b;
    t.grads = grads_.data() + b;
    t.exp_avg = m_.data() + b;
    t.exp_avg_sq = v_.data() + b;
    STRATA_RETURN_IF_ERROR(opt_.StepAt(hp, step_, t));
  }
  const double wall = Since(t0);
  last_cpu_s_ = ProcessCpuSeconds() - cpu0;
  return wall;
}

double ProcessCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0.0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::map<int, ThreadCpu> ThreadCpuSeconds() {
  namespace fs = std::filesystem;
  std::map<int, ThreadCpu> out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  const int pid = static_cast<int>(getpid());
  std::error_code ec;
  for (auto it = fs::directory_iterator("/proc/self/task", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string dir = it->path().string();
    std::ifstream stat(dir + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // the thread ended meanwhile
    // "tid (comm) state ppid ...": the comm may hold spaces and parentheses; fields after the
    // last ')' are 3..; utime and stime are fields 14 and 15.
    const size_t close = line.rfind(')'), open = line.find('(');
    if (close == std::string::npos || open == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    double utime = 0, stime = 0;
    for (int f = 3; f <= 15 && rest >> field; ++f) {
      if (f == 14) utime = std::stod(field);
      if (f == 15) stime = std::stod(field);
    }
    const int tid = std::stoi(line.substr(0, open));
    ThreadCpu t;
    t.name = tid == pid ? "main" : line.substr(open + 1, close - open - 1);
    t.cpu_s = (utime + stime) / tick;
    std::ifstream status(dir + "/status");
    while (std::getline(status, line)) {
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0 ||
          line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) {
        t.switches += std::stod(line.substr(line.find(':') + 1));
      }
    }
    out[tid] = t;
  }
  return out;
}

std::map<std::string, ThreadCpu> ThreadCpuDelta(const std::map<int, ThreadCpu>& before,
                                                const std::map<int, ThreadCpu>& after) {
  std::map<std::string, ThreadCpu> out;
  for (const auto& [tid, t] : after) {
    const auto b = before.find(tid);
    ThreadCpu& o = out[t.name];
    o.name = t.name;
    o.cpu_s += t.cpu_s - (b != before.end() ? b->second.cpu_s : 0.0);
    o.switches += t.switches - (b != before.end() ? b->second.switches : 0.0);
  }
  return out;
}

void AddThreadCpu(const std::map<std::string, ThreadCpu>& delta,
                  std::map<std::string, ThreadCpu>* sum) {
  for (const auto& [name, t] : delta) {
    ThreadCpu& o = (*sum)[name];
    o.name = name;
    o.cpu_s += t.cpu_s;
    o.switches += t.switches;
  }
}

double MeasureMemcpyGbps() {
  const size_t n = size_t{64} << 20;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    internal::StreamingCopy(b.data(), a.data(), n);  // the host device's link copy
    const double s = Since(t0);
    a[static_cast<size_t>(i)] = b[n - 1 - static_cast<size_t>(i)];  // keep the copy observable
    best = std::max(best, static_cast<double>(n) / s * 1e-9);
  }
  return best;
}

double MeasureChecksumGbps() {
  const size_t n = size_t{64} << 20, block = size_t{1} << 20;
  std::vector<uint8_t> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<uint8_t>(i * 131 + 7);
  double best = 0;
  uint64_t sink = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    for (size_t off = 0; off < n; off += block) sink ^= SwapSpace::BlockChecksum(&a[off], block);
    best = std::max(best, static_cast<double>(n) / Since(t0) * 1e-9);
  }
  if (sink == 0x5a5a5a5a5a5a5a5aull) std::fprintf(stderr, " ");  // keep the hashes observable
  return best;
}

namespace {

// Note [Only the written extents]
// A swap file holds reserved space no swap has written (fallocate's unwritten extents: a
// reserve's rounding, a gradient chunk of zeros, and until b5bce6f each file's 256 MiB of
// slack), and the filesystem answers reads there with zeros without touching the disk. Read
// whole, the files timed read 5.2-5.7 GB/s with the slack against 3.4-3.7 without it on the
// same disk (bench/overlap's io and nvme sizes, same session): the NVMe term was a third too
// small. So the sweep reads the data extents only (SEEK_DATA / SEEK_HOLE, which on ext4 skip
// unwritten extents), rounded out to whole requests. A filesystem without them reports the whole
// file as data: read whole, as before.
Result<std::vector<std::pair<uint64_t, uint64_t>>> WrittenExtents(const std::string& path,
                                                                  uint64_t size,
                                                                  uint64_t request_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return ErrnoToStatus(errno, "aio sweep: open " + path);
  std::vector<std::pair<uint64_t, uint64_t>> out;  // [begin, end), in order, merged
  off_t at = 0;
  while (static_cast<uint64_t>(at) < size) {
    const off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0) break;  // ENXIO: no data past `at`
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    if (hole < 0) hole = static_cast<off_t>(size);
    const uint64_t b = static_cast<uint64_t>(data) / request_bytes * request_bytes;
    const uint64_t e = std::min<uint64_t>(
        size, (static_cast<uint64_t>(hole) + request_bytes - 1) / request_bytes * request_bytes);
    if (!out.empty() && b <= out.back().second) {
      out.back().second = std::max(out.back().second, e);
    } else {
      out.emplace_back(b, e);
    }
    at = hole;
  }
  ::close(fd);
  return out;
}

// Note [A sustained sweep]
// A write pass of a GiB or two measures the host's write cache as much as the disk: bench/scale's
// 3.3B model wrote 66 GB per step, and a 2 GiB overwrite timed 7.1 GB/s where fio overwriting
// 16 GB sustained 2.2 GB/s on the same disk minutes later. Where the step's writes are that large
// the write pass overwrites the files the read pass read, as many bytes as it read: the same files
// and extents the step writes, overwritten as the swap overwrites them (Note [Overwrite sweep]),
// needing no free space beside them. Their contents are lost, so this runs after the engine.
Result<AioSpeed> MeasureAioSweepQuiet(const std::string& dir, const AioOptions& options,
                                      size_t request_bytes, uint64_t max_write_bytes,
                                      SweepWrites writes) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, uint64_t>> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec) && it->file_size(ec) > 0) {
      files.emplace_back(it->path().string(), it->file_size(ec));
    }
  }
  if (files.empty()) {
    return NotFoundError("aio sweep: no swap files under " + dir + " to read");
  }
  request_bytes = std::max<size_t>(4096, request_bytes / 4096 * 4096);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<AioHandle> aio, AioHandle::Create(options));
  STRATA_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::Allocate(request_bytes));
  AioSpeed out;
  out.engine = aio->Describe();
  out.files = static_cast<int>(files.size());

  // Note [Only the written extents]: found before the timed pass.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> extents;
  for (const auto& [path, size] : files) {
    STRATA_ASSIGN_OR_RETURN(auto e, WrittenExtents(path, size, request_bytes));
    extents.push_back(std::move(e));
  }
  const auto r0 = Clock::now();
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& path = files[f].first;
    for (const auto& [begin, end] : extents[f]) {
      for (uint64_t off = begin; off < end; off += request_bytes) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(request_bytes, end - off));
        STRATA_ASSIGN_OR_RETURN(size_t got, aio->Pread(path, buf.data(), n, off));
        out.read_bytes += got;
      }
    }
    STRATA_RETURN_IF_ERROR(aio->Close(path));
  }
  if (out.read_bytes == 0) {
    return NotFoundError("aio sweep: the swap files under " + dir + " hold no written data");
  }
  out.read_gbps = static_cast<double>(out.read_bytes) / Since(r0) * 1e-9;

  if (writes == SweepWrites::kInPlace) {  // Note [A sustained sweep]
    std::memset(buf.data(), 0x5a, request_bytes);
    const auto w0 = Clock::now();
    for (const auto& [path, size] : files) {
      for (uint64_t off = 0; off + request_bytes <= size && out.write_bytes < max_write_bytes;
           off += request_bytes) {
        STRATA_ASSIGN_OR_RETURN(size_t put, aio->Pwrite(path, buf.data(), request_bytes, off));
        out.write_bytes += put;
      }
      STRATA_RETURN_IF_ERROR(aio->Close(path));
    }
    out.write_gbps = static_cast<double>(out.write_bytes) / Since(w0) * 1e-9;
    return out;
  }

  const std::string scratch = (fs::path(dir) / "aio_sweep.scratch").string();
  const uint64_t total =
      std::max<uint64_t>(request_bytes, std::min<uint64_t>(out.read_bytes, max_write_bytes) /
                                            request_bytes * request_bytes);
  std::memset(buf.data(), 0x5a, request_bytes);
  // Note [Overwrite sweep]: the swap writes overwrite blocks the swap file already holds, so the
  // timed pass does too: a first, untimed pass allocates and writes the scratch file (ext4's
  // block allocation and size updates made first writes ~2.4x slower here: 2.8 vs 6-7 GB/s; the
  // NVMe term was that much too large and the io size came out at 0.67-0.95 of its "bound").
  for (uint64_t off = 0; off < total; off += request_bytes) {
    STRATA_RETURN_IF_ERROR(aio->Pwrite(scratch, buf.data(), request_bytes, off).status());
  }
  const auto w0 = Clock::now();
  for (uint64_t off = 0; off < total; off += request_bytes) {
    STRATA_ASSIGN_OR_RETURN(size_t put, aio->Pwrite(scratch, buf.data(), request_bytes, off));
    out.write_bytes += put;
  }
  out.write_gbps = static_cast<double>(out.write_bytes) / Since(w0) * 1e-9;
  STRATA_RETURN_IF_ERROR(aio->Close(scratch));
  fs::remove(scratch, ec);
  return out;
}

}  // namespace

// Note [A loaded sweep]
// The bound takes the disk speed of a quiet machine. Here the "NVMe" is a virtual disk whose
// transfers are memory copies on the host, so they share the memory bus with the step's own work:
// one core running memcpy took this disk from 3.5 to 3.0 GB/s reading and from 6.5 to 4.2 GB/s
// writing (a standalone experiment). The loaded sweep measures the same sweep while the step's
// compute (forward + backward, all resident) runs beside it, so the JSON shows how much of a gap
// between the step and its bound that contention explains. It is printed beside the bound and
// never replaces it.
Result<AioSpeed> MeasureAioSweep(const std::string& dir, const AioOptions& options,
                                 size_t request_bytes, uint64_t max_write_bytes,
                                 const std::function<Status()>& load, SweepWrites writes) {
  std::atomic<bool> stop{false};
  Status load_status;
  std::thread loader;
  if (load) {
    loader = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed) && load_status.ok()) {
        load_status = load();
      }
    });
  }
  Result<AioSpeed> out = MeasureAioSweepQuiet(dir, options, request_bytes, max_write_bytes, writes);
  if (loader.joinable()) {
    stop = true;
    loader.join();
    STRATA_RETURN_IF_ERROR(load_status.WithContext("the loaded sweep's load"));
  }
  return out;
}

// Note [A sweep beside idle spinners]
// The loaded sweep (Note [A loaded sweep]) shows the disk slower beside the step's compute; it
// does not say whether the compute takes CPU time from the I/O path on this machine (the aio
// threads, the checksums, the kernel's completions: work a better schedule could give the cores)
// or whether a busy core slows the disk by itself. This sweep runs beside one spinning thread per
// core at SCHED_IDLE: the guest's scheduler gives them a core only when no other thread of any
// process wants it, so they take no CPU time from the I/O path; what the disk loses beside them
// is the cost of busy cores outside the guest's scheduling (a virtual disk's I/O emulated on the
// host's CPUs, the memory bus). fio showed the same on this session's machine (1 MiB, O_DIRECT,
// libaio, depth 16): reads 1.14-1.29 GB/s alone, 0.76-0.96 beside two spinners at nice 19 or
// SCHED_IDLE; a 50/50 mix 0.55-0.72 + 0.57-0.75 alone, 0.42-0.54 + 0.45-0.56 beside them.
IdleSpinners::IdleSpinners(int threads) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this] {
      sched_param p{};
      if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &p) == 0) idle_.fetch_add(1);
      started_.fetch_add(1);
      uint64_t n = 0;
      while (!stop_.load(std::memory_order_relaxed)) {
        ++n;
        asm volatile("" : "+r"(n));  // the loop is not folded away
      }
    });
  }
  while (started_.load() < threads) std::this_thread::yield();
}

IdleSpinners::~IdleSpinners() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
}

int IdleSpinners::idle_threads() const { return idle_.load(); }

}  // namespace strata::bench
