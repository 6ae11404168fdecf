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
// (XXH3-64) per `checksum_block_bytes` block, computed at write and verified at read (or by the
// caller, block by block, while the bytes are in its cache: Read(id, buf, false), VerifyBlocks,
// Write(id, buf, sums)); a mismatch is DataLoss naming the tensor, file and offset. A write counts
// only once it has completed: Note [A write that fails] in swap_space.cc. Files are flock'ed while
// in use and removed on destruction; one that a live process holds is refused naming its pid,
// and one left by a run that is gone is recreated with a warning (Note [Swap file owner]).
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
  // Bytes by which a file grows at least when it needs space; 0: exactly what a reserve needs
  // (Note [Grow by what is needed] in swap_space.cc).
  size_t grow_bytes = 0;
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
  bool verify_ = true;                 // read: Wait() verifies the checksums
  Status early_;                       // an error found before any I/O was issued
};

class SwapSpace {
 public:
  // Opens (creating) one swap file per directory. Errors: a directory that does not exist or is
  // not writable; a swap file that another live process holds (FailedPrecondition naming its
  // pid). A file left by a run that is gone is truncated and reused, with one warning line.
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

  // Checksums where the bytes are already in cache (Note [Checksums by the caller] in
  // swap_space.cc): the caller verifies a read and hashes a write itself, block by block, as
  // its own pass over the bytes touches them.
  //
  // A read whose Wait() checks only the I/O, not the checksums (`verify` false; true is Read
  // above). The caller verifies every block with VerifyBlocks before it relies on it; the tensor
  // must not be written before then.
  SwapFuture Read(SwapId id, void* buf, bool verify);
  // Blocks [first, first + count) of `buf`, the tensor's bytes as read, against the checksums of
  // its last completed write: DataLoss naming the tensor, file and offset, as a verified Read.
  // `sums` (optional, count entries) receives the blocks' hashes. OK with checksums off.
  // InvalidArgument for a range past num_blocks(id); FailedPrecondition for a tensor no write of
  // which has completed.
  Status VerifyBlocks(SwapId id, const void* buf, size_t first, size_t count,
                      uint64_t* sums = nullptr) const;
  // A write with the caller's checksums: block_sums[b] = BlockChecksum of bytes
  // [b * checksum_block_bytes(), ...) of `buf` (the last block short). A count other than
  // num_blocks(id) fails the future with InvalidArgument; ignored with checksums off. Otherwise as
  // Write above (the sums take effect when the write completes).
  SwapFuture Write(SwapId id, const void* buf, std::vector<uint64_t> block_sums);
  // The checksum of one block (XXH3-64).
  static uint64_t BlockChecksum(const void* data, size_t size_bytes);
  // Checksum blocks of the tensor (0 for an unknown one) and their size.
  size_t num_blocks(SwapId id) const;
  size_t checksum_block_bytes() const { return options_.checksum_block_bytes; }
  bool checksums() const { return options_.checksums; }

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
  // fallocate's result growing `f` to `want` bytes; on failure `f` is cut back to what it held.
  static int Grow(FileState& f, uint64_t want);
  static void Release(FileState& f, uint64_t offset, uint64_t size);
  Status VerifyRead(SwapId id, const uint8_t* buf) const;
  // The write path after the checksums are known (`check_count`: they are the caller's).
  SwapFuture SubmitWrite(SwapId id, uint8_t* bytes, std::vector<uint64_t> sums, bool check_count);
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
