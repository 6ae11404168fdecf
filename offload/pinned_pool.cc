#include "offload/pinned_pool.h"

#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "core/units.h"
#include "offload/numa.h"

namespace strata {
namespace {

constexpr size_t kDirectIoAlignment = 4096;

size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::atomic<bool> g_mlock_warned{false};
std::atomic<bool> g_register_warned{false};
std::atomic<bool> g_numa_warned{false};

}  // namespace

const char* LockModeName(PinnedPool::LockMode mode) {
  switch (mode) {
    case PinnedPool::LockMode::kPageable:
      return "pageable";
    case PinnedPool::LockMode::kMlocked:
      return "mlocked";
    case PinnedPool::LockMode::kDeviceRegistered:
      return "device-registered";
  }
  return "?";
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    pool_ = std::exchange(o.pool_, nullptr);
    data_ = o.data_;
    size_ = o.size_;
    index_ = o.index_;
  }
  return *this;
}

void PinnedBuffer::Release() {
  if (pool_ != nullptr) std::exchange(pool_, nullptr)->Return(index_);
}

Result<std::unique_ptr<PinnedPool>> PinnedPool::Create(const PinnedPoolOptions& options) {
  if (options.buffer_bytes == 0 || options.buffer_count == 0) {
    return InvalidArgumentError(options.name + ": buffer_bytes and buffer_count must be > 0");
  }
  std::unique_ptr<PinnedPool> pool(new PinnedPool(options));
  STRATA_RETURN_IF_ERROR(pool->Init().WithContext(options.name));
  return pool;
}

Status PinnedPool::Init() {
  const size_t align = options_.buffer_bytes >= AlignedBuffer::kHugePageBytes
                           ? AlignedBuffer::kHugePageBytes
                           : kDirectIoAlignment;
  buffer_bytes_ = RoundUp(options_.buffer_bytes, align);
  count_ = options_.buffer_count;
  const size_t total = buffer_bytes_ * count_;
  if (options_.budget != nullptr) {
    STRATA_ASSIGN_OR_RETURN(reservation_,
                            options_.budget->Acquire(Tier::kCpu, total, options_.name));
  }

  // Map without touching, bind to the NUMA node, then first-touch so pages land there.
  AlignedBufferOptions buf_opts;
  buf_opts.huge_pages = true;
  buf_opts.populate = false;
  buf_opts.lock = false;
  STRATA_ASSIGN_OR_RETURN(slab_, AlignedBuffer::Allocate(total, buf_opts));
  Result<const HostTopology*> topo = HostTopology::Get();
  if (topo.ok()) {
    numa_node_ = options_.numa_node >= 0 ? options_.numa_node : (*topo)->CurrentNumaNode();
    Status bound = (*topo)->BindMemory(slab_.data(), slab_.size(), numa_node_);
    numa_bound_ = bound.ok();
    if (!bound.ok()) {
      LogOnce(
          g_numa_warned, LogLevel::kWarning,
          "pinned memory not NUMA-bound (" + bound.message() + "): using first-touch placement");
    }
  } else {
    LogOnce(g_numa_warned, LogLevel::kWarning,
            "no hwloc topology (" + topo.status().message() + "): pinned memory not NUMA-bound");
  }
  const size_t page = 4096;
  for (size_t off = 0; off < slab_.size(); off += page) slab_.bytes()[off] = 0;

  if (options_.lock) {
    if (options_.device != nullptr && options_.device->caps().host_registration) {
      Status reg = options_.device->RegisterHostMemory(slab_.data(), slab_.size());
      if (reg.ok()) {
        lock_mode_ = LockMode::kDeviceRegistered;
      } else {
        LogOnce(g_register_warned, LogLevel::kWarning,
                "registering " + FormatBytes(slab_.size()) + " of pinned memory with " +
                    options_.device->name() + " failed (" + reg.message() +
                    "): trying mlock, copies will be staged");
      }
    }
    if (lock_mode_ == LockMode::kPageable) {
      if (mlock(slab_.data(), slab_.size()) == 0) {
        lock_mode_ = LockMode::kMlocked;
      } else {
        LogOnce(g_mlock_warned, LogLevel::kWarning,
                options_.name + ": mlock of " + FormatBytes(slab_.size()) + " failed (" +
                    std::strerror(errno) +
                    "; raise 'ulimit -l' or grant CAP_IPC_LOCK): falling back to pageable memory");
      }
    }
  }

  free_.reserve(count_);
  for (size_t i = count_; i-- > 0;) free_.push_back(i);  // slot 0 leased first
  return Status::Ok();
}

PinnedPool::~PinnedPool() {
  {
    std::lock_guard lock(mu_);
    STRATA_CHECK_MSG(free_.size() == count_ || slab_.data() == nullptr,
                     options_.name + " destroyed with " + std::to_string(count_ - free_.size()) +
                         " buffers still leased");
  }
  if (lock_mode_ == LockMode::kDeviceRegistered) {
    options_.device->UnregisterHostMemory(slab_.data()).IgnoreError();  // nothing to report to
  } else if (lock_mode_ == LockMode::kMlocked) {
    munlock(slab_.data(), slab_.size());
  }
}

PinnedBuffer PinnedPool::Lease() {
  const size_t index = free_.back();
  free_.pop_back();
  ++stats_.acquire_count;
  ++stats_.in_use;
  if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  return PinnedBuffer(this, slab_.bytes() + index * buffer_bytes_, buffer_bytes_, index);
}

PinnedBuffer PinnedPool::Acquire() {
  std::unique_lock lock(mu_);
  if (free_.empty()) {
    ++stats_.wait_count;
    free_cv_.wait(lock, [&] { return !free_.empty(); });
  }
  return Lease();
}

Result<PinnedBuffer> PinnedPool::TryAcquire() {
  std::lock_guard lock(mu_);
  if (free_.empty()) {
    return UnavailableError(options_.name + ": all " + std::to_string(count_) +
                            " buffers are in use");
  }
  return Lease();
}

Result<PinnedBuffer> PinnedPool::AcquireFor(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (free_.empty()) {
    ++stats_.wait_count;
    if (!free_cv_.wait_for(lock, timeout, [&] { return !free_.empty(); })) {
      return UnavailableError(options_.name + ": no buffer freed within " +
                              std::to_string(timeout.count()) + " ms (all " +
                              std::to_string(count_) + " in use)");
    }
  }
  return Lease();
}

void PinnedPool::Return(size_t index) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(index);  // never reallocates: capacity == count_
    --stats_.in_use;
  }
  free_cv_.notify_one();
}

size_t PinnedPool::free_count() const {
  std::lock_guard lock(mu_);
  return free_.size();
}

PinnedPoolStats PinnedPool::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::string PinnedPool::HugePages() const {
  const size_t backed = slab_.HugePageBackedBytes();
  const int pct = static_cast<int>(
      100.0 * static_cast<double>(backed) / static_cast<double>(slab_.size()) + 0.5);
  return "2 MiB-aligned, " + std::to_string(pct) + "% on transparent huge pages";
}

std::string PinnedPool::Describe() const {
  return options_.name + ": " + std::to_string(count_) + " x " + FormatBytes(buffer_bytes_) + ", " +
         LockModeName(lock_mode_) + ", NUMA node " + std::to_string(numa_node_) +
         (numa_bound_ ? " (bound)" : " (not bound)") + ", " + HugePages();
}

}  // namespace strata
