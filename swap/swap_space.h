// SwapSpace: where swapped tensors live on NVMe - the swap file layout shared by ParamSwapper and
// OptimizerSwapper.
//
// Layout (docs/swap.md has the measurement behind the choice): one preallocated file per swap
// directory per rank and kind ("<dir>/strata-<name>-rank<R>.swap"), kept open, with an in-memory
// extent table. A tensor of at least `stripe_min_bytes` is cut into one contiguous part per
// directory so reading it uses every drive at once (bandwidths add up; DeepSpeed users must build
// a RAID-0 for this); smaller tensors go whole to one directory, round-robin. Extents are 4 KiB
// aligned; the padding is invisible to callers. Space is reserved with fallocate at Reserve(), so
// a full disk is reported there, before any state depends on it.
//
// Integrity (on by default; `strata.swap_checksums: false` turns the checksums off): xxHash
// (XXH3-64) per `checksum_block_bytes` block, computed at write and verified at read; a mismatch
// is DataLoss naming the tensor, file and offset. A write counts only once it has completed:
// Note [A write that fails] in swap_space.cc. Files are flock'ed while in use and removed on
// destruction; a file left by a crashed run is detected at Create and reported (reused only with
// `reuse_stale`).
//
// Thread safety: all methods may be called concurrently. A tensor is not read or written while
// its write is in flight (FailedPrecondition), and Free() needs its I/O finished.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "aio/aio_file.h"
#include "aio/aio_handle.h"
#include "core/status.h"
#include "offload/tier_budget.h"

namespace strata {

struct SwapSpaceOptions {
  std::vector<std::string> dirs;  // nvme_path, or several to stripe over
  std::string name = "swap";      // e.g. "param", "optimizer"
  int rank = 0;
  bool checksums = true;  // strata.swap_checksums
  size_t checksum_block_bytes = size_t{1} << 20;
  size_t stripe_min_bytes = size_t{4} << 20;
  bool reuse_stale = false;
  // Bytes by which a file grows when it needs space (fallocate granularity).
  size_t grow_bytes = size_t{256} << 20;
  // Optional: reserved bytes are charged to Tier::kNvme (OutOfMemory past its limit).
  TierBudget* budget = nullptr;
};

using SwapId = uint64_t;

class SwapSpace;

// A read or write in flight. Copyable; Wait() may be called repeatedly. For a read it verifies
// the checksums; for a write it records the outcome in the swap space (see SwapSpace::Write).
// The SwapSpace must outlive it.
class SwapFuture {
 public:
  SwapFuture() = default;
  // A future that is already done with `error`.
  static SwapFuture Failed(Status error) {
    SwapFuture f;
    f.early_ = std::move(error);
    return f;
  }
  bool ready() const;
  Status Wait();

 private:
  friend class SwapSpace;
  enum class Kind : uint8_t { kNone, kRead, kWrite };
  AioFuture io_;
  SwapSpace* space_ = nullptr;
  Kind kind_ = Kind::kNone;
  uint64_t id_ = 0;
  uint64_t write_gen_ = 0;             // write: which write of the tensor this is
  const uint8_t* read_buf_ = nullptr;  // read: the bytes whose checksums are verified
  Status early_;                       // an error found before any I/O was issued
};

class SwapSpace {
 public:
  // Opens (creating) one swap file per directory. Errors: a directory that does not exist or is
  // not writable; a swap file that another live process holds (flock); a stale one from a crashed
  // run, unless reuse_stale.
  static Result<std::unique_ptr<SwapSpace>> Create(const SwapSpaceOptions& options, AioHandle* aio);
  ~SwapSpace();  // closes and removes the files

  // Reserves room for a tensor of `size_bytes`. ENOSPC here is IoError naming the directory.
  Result<SwapId> Reserve(size_t size_bytes);
  // Returns the tensor's room to the free list. No I/O on it may be in flight.
  Status Free(SwapId id);

  // Async write of the tensor's `size_bytes` from `buf` / read into `buf`. `buf` must stay valid
  // until the future is waited. Checksums (if on) are computed before the write is issued and
  // take effect when it completes. A write whose I/O fails leaves the tensor torn: reading it is
  // FailedPrecondition naming the failed write, until a write succeeds. Reading or writing a
  // tensor whose write is still in flight is FailedPrecondition.
  SwapFuture Write(SwapId id, const void* buf);
  SwapFuture Read(SwapId id, void* buf);

  size_t size_bytes(SwapId id) const;
  // Bytes reserved in files (including alignment) and files' total size.
  uint64_t reserved_bytes() const;
  const std::vector<std::string>& files() const { return paths_; }
  const SwapSpaceOptions& options() const { return options_; }

 private:
  struct Part {
    int file = 0;
    uint64_t offset = 0;      // in the file, 4 KiB aligned
    uint64_t size = 0;        // data bytes
    uint64_t tensor_off = 0;  // where this part starts in the tensor
  };
  // kUnwritten -> kWriting -> kWritten | kTorn; a write from kWritten or kTorn goes to kWriting.
  enum class State : uint8_t { kUnwritten, kWriting, kWritten, kTorn };
  struct Tensor {
    size_t size_bytes = 0;
    std::vector<Part> parts;
    std::vector<uint64_t> checksums;          // per block, of the last completed write
    std::vector<uint64_t> pending_checksums;  // of the write in flight
    State state = State::kUnwritten;
    uint64_t write_gen = 0;     // bumped per write
    AioFuture write_io;         // the write in flight (kWriting)
    Status torn;                // kTorn: the failed write's error
    uint64_t budget_bytes = 0;  // charged to options_.budget
  };
  struct FileState {
    int lock_fd = -1;
    uint64_t end = 0;                                 // bump pointer
    uint64_t allocated = 0;                           // bytes fallocate'd
    std::vector<std::pair<uint64_t, uint64_t>> free;  // (offset, size), first fit
  };

  friend class SwapFuture;
  SwapSpace(const SwapSpaceOptions& options, AioHandle* aio) : options_(options), aio_(aio) {}
  Status OpenFiles();
  Result<uint64_t> Allocate(int file, uint64_t size);
  static void Release(FileState& f, uint64_t offset, uint64_t size);
  Status VerifyRead(SwapId id, const uint8_t* buf) const;
  // Records how write `gen` of `id` ended (from SwapFuture::Wait); returns `io`.
  Status FinishWrite(SwapId id, uint64_t gen, const Status& io);
  static void FinishWriteLocked(Tensor& t, const Status& io);
  // kWriting with its I/O done: record the outcome. Still in flight: FailedPrecondition.
  static Status SettleLocked(SwapId id, Tensor& t, const char* what);
  AioFuture Submit(const Tensor& t, IoOp op, uint8_t* buf);

  SwapSpaceOptions options_;
  AioHandle* aio_;
  std::vector<std::string> paths_;
  std::vector<AioFile> aio_files_;  // one per path, opened once
  mutable std::mutex mu_;
  std::vector<FileState> files_;
  std::unordered_map<SwapId, Tensor> tensors_;
  SwapId next_id_ = 1;
  int next_small_file_ = 0;
  uint64_t reserved_ = 0;
};

}  // namespace strata
