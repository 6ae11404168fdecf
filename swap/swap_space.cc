#include "swap/swap_space.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#ifdef STRATA_HAVE_XXH3_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "core/units.h"
#include "swap/swap_file_owner.h"

namespace strata {
namespace {

constexpr uint64_t kAlign = 4096;
uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

bool SwapFuture::ready() const { return !early_.ok() || !io_.valid() || io_.ready(); }

Status SwapFuture::Wait() {
  if (!early_.ok()) return early_;
  Status io;
  if (io_.valid()) {
    auto n = io_.Wait();
    if (!n.ok()) io = n.status();
  }
  switch (kind_) {
    case Kind::kWrite:
      return space_->FinishWrite(id_, write_gen_, io);
    case Kind::kRead:
      if (!io.ok()) return io;
      return space_->options().checksums && verify_ ? space_->VerifyRead(id_, read_buf_)
                                                    : Status::Ok();
    case Kind::kNone:
      break;
  }
  return io;
}

Result<std::unique_ptr<SwapSpace>> SwapSpace::Create(const SwapSpaceOptions& o, AioHandle* aio) {
  if (o.dirs.empty()) return InvalidArgumentError("swap: no nvme_path given");
  if (aio == nullptr) return InvalidArgumentError("swap: no AioHandle");
  if (o.checksum_block_bytes == 0 || o.checksum_block_bytes % kAlign != 0) {
    return InvalidArgumentError("swap: checksum block " + std::to_string(o.checksum_block_bytes) +
                                " must be a positive multiple of 4096");
  }
  std::unique_ptr<SwapSpace> s(new SwapSpace(o, aio));
  STRATA_RETURN_IF_ERROR(s->OpenFiles());
  return s;
}

// Note [Swap file owner]
// Each swap file is flock'ed (exclusive) by the SwapSpace using it, for as long as it exists:
// the kernel drops the lock when its holder exits however it ends (SIGKILL, OOM kill, crash). So
// at Create a file that can be locked but exists was left by a run that is gone; one that cannot
// be locked belongs to a live process, found by pid through /proc/locks (swap_file_owner.h) and
// named in the error. The lock is on the file itself (not a side file), so a file another
// SwapSpace in this process holds is refused too: flock locks belong to the open file.
Status SwapSpace::OpenFiles() {
  for (const std::string& dir : options_.dirs) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return InvalidArgumentError("swap: nvme_path '" + dir + "' is not an existing directory");
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      return ErrnoToStatus(errno, "swap: nvme_path '" + dir + "' is not writable");
    }
    std::string path =
        dir + "/strata-" + options_.name + "-rank" + std::to_string(options_.rank) + ".swap";
    const bool existed = ::access(path.c_str(), F_OK) == 0;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoToStatus(errno, "swap: create " + path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      // Note [Swap file owner]: a held lock is a live process; name it.
      const std::string holder = DescribeProcess(SwapFileLockHolder(fd));
      ::close(fd);
      return FailedPreconditionError(
          "swap: " + path + " is in use by " + holder +
          ", a run on the same nvme_path and rank; wait for it to end, or give this run "
          "another nvme_path");
    }
    if (existed) {
      // Nobody holds it, so the run that wrote it is gone (killed, crashed, out of memory).
      // Swap contents are scratch - --load rebuilds them from the checkpoint - so start it over.
      struct stat fst;
      const uint64_t size = ::fstat(fd, &fst) == 0 ? static_cast<uint64_t>(fst.st_size) : 0;
      if (::ftruncate(fd, 0) != 0) {
        const int err = errno;
        ::close(fd);
        return ErrnoToStatus(err, "swap: truncate " + path);
      }
      LogWarning("swap: " + path + " (" + FormatBytes(size) +
                 ") was left by an earlier run that did not exit cleanly and no process holds it; "
                 "recreated it (swap contents are scratch)");
    }
    FileState fs;
    fs.lock_fd = fd;
    files_.push_back(fs);
    paths_.push_back(path);
    auto file = aio_->Open(path, AioOpenMode::kReadWrite);
    if (!file.ok()) return file.status().WithContext("swap");
    aio_files_.push_back(std::move(file).value());
  }
  return Status::Ok();
}

SwapSpace::~SwapSpace() {
  if (options_.budget != nullptr) {
    for (const auto& [id, t] : tensors_) {
      if (t.budget_bytes) options_.budget->Release(Tier::kNvme, t.budget_bytes);
    }
  }
  aio_files_.clear();
  for (size_t i = 0; i < paths_.size(); ++i) {
    aio_->Close(paths_[i]).IgnoreError();
    ::unlink(paths_[i].c_str());
    ::close(files_[i].lock_fd);
  }
}

// Note [Grow by what is needed]
// A file grows by what the reserve needs (grow_bytes 0, the default), not by a slack of its own:
// the swap files of every kind and every rank on a node share one filesystem, and a slack one
// file holds is space the others cannot have. With 256 MiB of slack a file, two ranks' six files
// refused a 7.4 MiB-a-rank job on an ext4 disk with 580 MB free. And a fallocate that fails with
// ENOSPC is not undone by ext4: the blocks it got stay allocated (and the file's size grows to
// them), so the disk is left full for the next file. Grow therefore cuts the file back to what it
// held before whenever the fallocate fails.
int SwapSpace::Grow(FileState& f, uint64_t want) {
  const int rc = ::posix_fallocate(f.lock_fd, static_cast<off_t>(f.allocated),
                                   static_cast<off_t>(want - f.allocated));
  if (rc != 0 && ::ftruncate(f.lock_fd, static_cast<off_t>(f.allocated)) != 0) {
    LogWarning("swap: cutting a file back after a failed fallocate: " +
               std::string(std::strerror(errno)));
  }
  return rc;
}

Result<uint64_t> SwapSpace::Allocate(int file, uint64_t size) {
  FileState& f = files_[static_cast<size_t>(file)];
  for (auto it = f.free.begin(); it != f.free.end(); ++it) {
    if (it->second < size) continue;
    uint64_t off = it->first;
    if (it->second == size) {
      f.free.erase(it);
    } else {
      it->first += size;
      it->second -= size;
    }
    return off;
  }
  uint64_t off = f.end;
  if (off + size > f.allocated) {
    // Note [Grow by what is needed].
    uint64_t want = std::max<uint64_t>(off + size, f.allocated + options_.grow_bytes);
    int rc = Grow(f, want);
    if (rc != 0 && want > off + size) {
      want = off + size;
      rc = Grow(f, want);
    }
    if (rc != 0) {
      return ErrnoToStatus(
          rc, "swap: reserve " + FormatBytes(size) + " in " + paths_[static_cast<size_t>(file)]);
    }
    f.allocated = want;
  }
  f.end = off + size;
  return off;
}

Result<SwapId> SwapSpace::Reserve(size_t size_bytes) {
  if (size_bytes == 0) return InvalidArgumentError("swap: cannot reserve a 0-byte tensor");
  std::lock_guard lock(mu_);
  Tensor t;
  t.size_bytes = size_bytes;
  if (options_.budget != nullptr) {
    STRATA_RETURN_IF_ERROR(
        options_.budget->Reserve(Tier::kNvme, AlignUp(size_bytes), "swap " + options_.name));
  }
  t.budget_bytes = options_.budget != nullptr ? AlignUp(size_bytes) : 0;
  const int d = static_cast<int>(files_.size());
  if (d > 1 && size_bytes >= options_.stripe_min_bytes) {
    uint64_t per = AlignUp((size_bytes + d - 1) / d);
    uint64_t pos = 0;
    for (int i = 0; i < d && pos < size_bytes; ++i) {
      uint64_t n = std::min<uint64_t>(per, size_bytes - pos);
      auto off = Allocate(i, AlignUp(n));
      if (!off.ok()) {
        for (const Part& q : t.parts)
          Release(files_[static_cast<size_t>(q.file)], q.offset, AlignUp(q.size));
        if (t.budget_bytes) options_.budget->Release(Tier::kNvme, t.budget_bytes);
        return off.status();
      }
      t.parts.push_back({i, *off, n, pos});
      pos += n;
    }
  } else {
    int i = next_small_file_;
    next_small_file_ = (next_small_file_ + 1) % d;
    auto off = Allocate(i, AlignUp(size_bytes));
    if (!off.ok()) {
      if (t.budget_bytes) options_.budget->Release(Tier::kNvme, t.budget_bytes);
      return off.status();
    }
    t.parts.push_back({i, *off, size_bytes, 0});
  }
  for (const Part& p : t.parts) reserved_ += AlignUp(p.size);
  SwapId id = next_id_++;
  tensors_.emplace(id, std::move(t));
  return id;
}

Status SwapSpace::Free(SwapId id) {
  std::lock_guard lock(mu_);
  auto it = tensors_.find(id);
  if (it == tensors_.end()) return NotFoundError("swap: unknown tensor " + std::to_string(id));
  for (const Part& p : it->second.parts) {
    Release(files_[static_cast<size_t>(p.file)], p.offset, AlignUp(p.size));
    reserved_ -= AlignUp(p.size);
  }
  if (it->second.budget_bytes) options_.budget->Release(Tier::kNvme, it->second.budget_bytes);
  tensors_.erase(it);
  return Status::Ok();
}

// Returns [offset, offset+size) to the file's free list, merging neighbours; a free range that
// reaches the end of the used area moves the end back, so the file does not keep growing under
// a reserve/free churn of mixed sizes.
void SwapSpace::Release(FileState& f, uint64_t offset, uint64_t size) {
  f.free.emplace_back(offset, size);
  std::sort(f.free.begin(), f.free.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : f.free) {
    if (!merged.empty() && merged.back().first + merged.back().second == r.first) {
      merged.back().second += r.second;
    } else {
      merged.push_back(r);
    }
  }
  if (!merged.empty() && merged.back().first + merged.back().second == f.end) {
    f.end = merged.back().first;
    merged.pop_back();
  }
  f.free = std::move(merged);
}

size_t SwapSpace::size_bytes(SwapId id) const {
  std::lock_guard lock(mu_);
  auto it = tensors_.find(id);
  return it == tensors_.end() ? 0 : it->second.size_bytes;
}

uint64_t SwapSpace::reserved_bytes() const {
  std::lock_guard lock(mu_);
  return reserved_;
}

// One AioHandle request per part of the tensor (one per swap directory it is striped over).
AioFuture SwapSpace::Submit(const Tensor& t, IoOp op, uint8_t* buf) {
  if (t.parts.size() == 1) {
    const Part& p = t.parts[0];
    const AioFile& f = aio_files_[static_cast<size_t>(p.file)];
    return op == IoOp::kRead ? f.SubmitRead(buf, p.size, p.offset)
                             : f.SubmitWrite(buf, p.size, p.offset);
  }
  std::vector<AioRequest> reqs;
  reqs.reserve(t.parts.size());
  for (const Part& p : t.parts) {
    AioRequest r;
    r.op = op;
    r.buf = buf + p.tensor_off;
    r.size_bytes = p.size;
    r.offset_bytes = p.offset;
    r.file = &aio_files_[static_cast<size_t>(p.file)];
    reqs.push_back(r);
  }
  return aio_->SubmitBatch(reqs);
}

// Note [A write that fails]
// A write is not a fact until its I/O has completed: its checksums and the tensor's "written"
// state are recorded only then (by the first SwapFuture::Wait, or by the next Read/Write that
// finds the I/O done). A write that fails - EIO, ENOSPC, a short write - may have overwritten part
// of the old contents, so the tensor is torn: a read is FailedPrecondition naming the failed
// write (never the old data, never a checksum mismatch for what was a failed write) until a
// write succeeds.
void SwapSpace::FinishWriteLocked(Tensor& t, const Status& io) {
  if (io.ok()) {
    t.checksums = std::move(t.pending_checksums);
    t.state = State::kWritten;
    t.torn = Status::Ok();
  } else {
    t.state = State::kTorn;
    t.torn = io;
  }
  t.pending_checksums.clear();
  t.write_io = AioFuture();
}

Status SwapSpace::SettleLocked(SwapId id, Tensor& t, const char* what) {
  if (t.state != State::kWriting) return Status::Ok();
  if (!t.write_io.ready()) {
    return FailedPreconditionError("swap: tensor " + std::to_string(id) + " is " + what +
                                   " while its write is in flight; wait for the write first");
  }
  auto n = t.write_io.Wait();
  FinishWriteLocked(t, n.ok() ? Status::Ok() : n.status());
  return Status::Ok();
}

Status SwapSpace::FinishWrite(SwapId id, uint64_t gen, const Status& io) {
  std::lock_guard lock(mu_);
  auto it = tensors_.find(id);
  if (it != tensors_.end() && it->second.state == State::kWriting && it->second.write_gen == gen) {
    FinishWriteLocked(it->second, io);
  }
  return io;
}

SwapFuture SwapSpace::Write(SwapId id, const void* buf) {
  auto* bytes = const_cast<uint8_t*>(static_cast<const uint8_t*>(buf));
  size_t size = 0;
  {
    std::lock_guard lock(mu_);
    auto it = tensors_.find(id);
    if (it == tensors_.end()) {
      return SwapFuture::Failed(
          NotFoundError("swap: write of unknown tensor " + std::to_string(id)));
    }
    if (Status s = SettleLocked(id, it->second, "written again"); !s.ok()) {
      return SwapFuture::Failed(s);
    }
    size = it->second.size_bytes;
  }
  // Hash outside the lock: a sub-group is hundreds of MB and reads of other tensors must not
  // wait for it.
  std::vector<uint64_t> sums;
  if (options_.checksums) {
    const size_t blk = options_.checksum_block_bytes;
    sums.resize((size + blk - 1) / blk);
    for (size_t i = 0; i < sums.size(); ++i) {
      sums[i] = BlockChecksum(bytes + i * blk, std::min(blk, size - i * blk));
    }
  }
  return SubmitWrite(id, bytes, std::move(sums), /*check_count=*/false);
}

SwapFuture SwapSpace::Write(SwapId id, const void* buf, std::vector<uint64_t> block_sums) {
  if (!options_.checksums) block_sums.clear();
  return SubmitWrite(id, const_cast<uint8_t*>(static_cast<const uint8_t*>(buf)),
                     std::move(block_sums), options_.checksums);
}

SwapFuture SwapSpace::SubmitWrite(SwapId id, uint8_t* bytes, std::vector<uint64_t> sums,
                                  bool check_count) {
  SwapFuture f;
  std::lock_guard lock(mu_);
  auto it = tensors_.find(id);
  if (it == tensors_.end()) {
    return SwapFuture::Failed(
        NotFoundError("swap: write of unknown or freed tensor " + std::to_string(id)));
  }
  Tensor& t = it->second;
  if (check_count) {
    const size_t blk = options_.checksum_block_bytes;
    const size_t want = (t.size_bytes + blk - 1) / blk;
    if (sums.size() != want) {
      return SwapFuture::Failed(InvalidArgumentError(
          "swap: write of tensor " + std::to_string(id) + " with " + std::to_string(sums.size()) +
          " block checksums; its " + FormatBytes(t.size_bytes) + " are " + std::to_string(want) +
          " blocks of " + FormatBytes(blk) + " (give one checksum per block)"));
    }
  }
  if (Status s = SettleLocked(id, t, "written again"); !s.ok()) return SwapFuture::Failed(s);
  t.pending_checksums = std::move(sums);
  t.state = State::kWriting;
  t.write_io = Submit(t, IoOp::kWrite, bytes);  // enqueues only: no I/O waits under the lock
  f.io_ = t.write_io;
  f.space_ = this;
  f.kind_ = SwapFuture::Kind::kWrite;
  f.id_ = id;
  f.write_gen_ = ++t.write_gen;
  return f;
}

SwapFuture SwapSpace::Read(SwapId id, void* buf) { return Read(id, buf, /*verify=*/true); }

SwapFuture SwapSpace::Read(SwapId id, void* buf, bool verify) {
  SwapFuture f;
  std::lock_guard lock(mu_);
  auto it = tensors_.find(id);
  if (it == tensors_.end()) {
    f.early_ = NotFoundError("swap: read of unknown tensor " + std::to_string(id));
    return f;
  }
  Tensor& t = it->second;
  if (Status s = SettleLocked(id, t, "read"); !s.ok()) return SwapFuture::Failed(s);
  if (t.state == State::kUnwritten) {
    f.early_ = FailedPreconditionError("swap: tensor " + std::to_string(id) +
                                       " is read before it was ever written");
    return f;
  }
  if (t.state == State::kTorn) {
    f.early_ = FailedPreconditionError(
        "swap: tensor " + std::to_string(id) + " is torn: its last write failed (" +
        t.torn.ToString() +
        "), so its bytes on disk are neither the old nor the new contents; write it again "
        "before reading it");
    return f;
  }
  f.io_ = Submit(t, IoOp::kRead, static_cast<uint8_t*>(buf));
  f.space_ = this;
  f.kind_ = SwapFuture::Kind::kRead;
  f.id_ = id;
  f.read_buf_ = static_cast<const uint8_t*>(buf);
  f.verify_ = verify;
  return f;
}

// Note [Checksums by the caller]
// A tensor that its user streams through anyway (the optimizer's update pass over a sub-group)
// need not be hashed in two extra passes from DRAM, one after the read and one before the write:
// the user reads it with verification deferred (Read(id, buf, false)), verifies each block with
// VerifyBlocks just before it first touches it (the bytes are then in cache for its own pass),
// and hashes each block right after its last change (BlockChecksum), giving the sums to
// Write(id, buf, sums). The protection is the same: every block is compared with the checksum of
// the last completed write before its bytes are used, a mismatch is the same DataLoss, and a
// write's sums are still recorded only when it completes (Note [A write that fails]).
uint64_t SwapSpace::BlockChecksum(const void* data, size_t size_bytes) {
#ifdef STRATA_HAVE_XXH3_DISPATCH
  // The widest SIMD this CPU has (swap/CMakeLists.txt); the same values as XXH3_64bits.
  return XXH3_64bits_dispatch(data, size_bytes);
#else
  return XXH3_64bits(data, size_bytes);
#endif
}

size_t SwapSpace::num_blocks(SwapId id) const {
  std::lock_guard lock(mu_);
  auto it = tensors_.find(id);
  if (it == tensors_.end()) return 0;
  const size_t blk = options_.checksum_block_bytes;
  return (it->second.size_bytes + blk - 1) / blk;
}

Status SwapSpace::VerifyRead(SwapId id, const uint8_t* buf) const {
  return VerifyBlocks(id, buf, 0, num_blocks(id));
}

Status SwapSpace::VerifyBlocks(SwapId id, const void* buf, size_t first, size_t count,
                               uint64_t* sums) const {
  const auto* bytes = static_cast<const uint8_t*>(buf);
  const size_t blk = options_.checksum_block_bytes;
  std::vector<uint64_t> want;
  std::vector<Part> parts;
  size_t size = 0;
  {
    std::lock_guard lock(mu_);
    auto it = tensors_.find(id);
    if (it == tensors_.end()) return NotFoundError("swap: tensor " + std::to_string(id) + " freed");
    const Tensor& t = it->second;
    size = t.size_bytes;
    const size_t blocks = (size + blk - 1) / blk;
    if (first > blocks || count > blocks - first) {
      return InvalidArgumentError("swap: verify of blocks [" + std::to_string(first) + ", " +
                                  std::to_string(first + count) + ") of tensor " +
                                  std::to_string(id) + ", which has " + std::to_string(blocks));
    }
    if (!options_.checksums && sums == nullptr) return Status::Ok();
    if (options_.checksums) {
      if (t.checksums.size() != blocks) {
        return FailedPreconditionError("swap: verify of tensor " + std::to_string(id) +
                                       ", which no write has completed yet");
      }
      want.assign(t.checksums.begin() + static_cast<std::ptrdiff_t>(first),
                  t.checksums.begin() + static_cast<std::ptrdiff_t>(first + count));
      parts = t.parts;
    }
  }
  for (size_t k = 0; k < count; ++k) {
    const size_t off = (first + k) * blk;
    const size_t len = std::min(blk, size - off);
    const uint64_t h = BlockChecksum(bytes + off, len);
    if (sums != nullptr) sums[k] = h;
    if (!options_.checksums || h == want[k]) continue;
    // Name the file and file offset of the bad block.
    std::string where;
    for (const Part& p : parts) {
      if (off >= p.tensor_off && off < p.tensor_off + p.size) {
        where = paths_[static_cast<size_t>(p.file)] + " @ " +
                std::to_string(p.offset + (off - p.tensor_off));
      }
    }
    return DataLossError("swap: checksum mismatch in tensor " + std::to_string(id) +
                         " at tensor offset " + std::to_string(off) + " (" + where + ", block of " +
                         FormatBytes(len) + "): the data on disk is not what was written");
  }
  return Status::Ok();
}

}  // namespace strata
