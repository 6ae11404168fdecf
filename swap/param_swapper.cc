#include "swap/param_swapper.h"

#include <cstring>

#include <algorithm>

#include "core/units.h"

namespace strata {

Result<std::unique_ptr<ParamSwapper>> ParamSwapper::Create(const ParamSwapperOptions& o,
                                                           AioHandle* aio) {
  if (o.element_bytes != 2 && o.element_bytes != 4) {
    return InvalidArgumentError("offload_param: element size " + std::to_string(o.element_bytes) +
                                " bytes; allowed 2 (fp16/bf16) or 4 (fp32)");
  }
  if (o.buffer_count == 0 || o.buffer_size == 0) {
    return InvalidArgumentError("offload_param.buffer_count and buffer_size must be > 0");
  }
  std::unique_ptr<ParamSwapper> s(new ParamSwapper(o));
  STRATA_ASSIGN_OR_RETURN(s->space_, SwapSpace::Create(SwapSpaceOptionsFor(o, "param"), aio));
  PinnedPoolOptions po;
  po.buffer_bytes = o.buffer_size * o.element_bytes;
  po.buffer_count = o.buffer_count;
  po.lock = o.pin_memory;
  po.device = o.device;
  po.budget = o.budget;
  po.name = "offload_param swap buffers";
  STRATA_ASSIGN_OR_RETURN(s->pool_, PinnedPool::Create(po));
  // The pool's buffers are consecutive in one slab: lease them all and sub-allocate the slab, so
  // small parameters share a buffer and large ones may span several.
  for (size_t i = 0; i < o.buffer_count; ++i) s->leases_.push_back(s->pool_->Acquire());
  const size_t bytes = s->pool_->buffer_bytes() * s->pool_->buffer_count();
  s->arena_ = std::make_unique<BufferArena>(
      static_cast<uint8_t*>(const_cast<void*>(s->pool_->slab())), bytes);
  s->stats_.buffer_bytes_capacity = bytes;
  return s;
}

ParamSwapper::~ParamSwapper() {
  // Outstanding I/O must finish before the buffers and swap files go away.
  {
    std::lock_guard lock(mu_);
    for (auto& [id, p] : params_) {
      if (p.state == State::kReading || p.state == State::kWriting) p.io.Wait().IgnoreError();
    }
  }
  leases_.clear();
}

Status ParamSwapper::Register(ParamId id, size_t numel) {
  if (numel == 0) return InvalidArgumentError("param " + std::to_string(id) + ": numel is 0");
  std::lock_guard lock(mu_);
  if (params_.count(id)) {
    return InvalidArgumentError("param " + std::to_string(id) + " is already registered");
  }
  Param p;
  p.numel = numel;
  if (cpu_elements_ + numel <= options_.max_in_cpu) {
    p.state = State::kCpu;
    p.cpu.resize(numel * options_.element_bytes);
    p.buf = p.cpu.data();
    cpu_elements_ += numel;
    ++stats_.params_in_cpu;
  } else {
    const size_t bytes = numel * options_.element_bytes;
    if (bytes > arena_->capacity_bytes()) {
      return InvalidArgumentError(
          "param " + std::to_string(id) + " has " + std::to_string(numel) +
          " elements, more than all swap buffers hold (offload_param.buffer_count x buffer_size "
          "= " +
          std::to_string(options_.buffer_count * options_.buffer_size) + ")");
    }
    auto sid = space_->Reserve(bytes);
    if (!sid.ok()) return sid.status().WithContext("param " + std::to_string(id));
    p.swap_id = *sid;
    p.state = State::kOnNvme;
    ++stats_.params_on_nvme;
  }
  params_.emplace(id, std::move(p));
  return Status::Ok();
}

bool ParamSwapper::on_nvme(ParamId id) const {
  std::lock_guard lock(mu_);
  auto it = params_.find(id);
  return it != params_.end() && it->second.state != State::kCpu;
}

Result<ParamSwapper::Param*> ParamSwapper::Find(ParamId id) {
  auto it = params_.find(id);
  if (it == params_.end())
    return NotFoundError("param " + std::to_string(id) + " is not registered");
  return &it->second;
}

Result<std::span<uint8_t>> ParamSwapper::Allocate(ParamId id) {
  std::lock_guard lock(mu_);
  STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
  const size_t bytes = p->numel * options_.element_bytes;
  if (p->state == State::kOnNvme) {
    STRATA_ASSIGN_OR_RETURN(p->buf, arena_->Allocate(bytes));
    p->state = State::kResident;
  }
  if (p->state == State::kReading) {
    return FailedPreconditionError("param " + std::to_string(id) + " is being swapped in");
  }
  return std::span<uint8_t>(p->buf, bytes);
}

Status ParamSwapper::SwapIn(std::span<const ParamId> ids) {
  std::lock_guard lock(mu_);
  std::vector<Param*> todo;
  for (ParamId id : ids) {
    STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
    if (p->state == State::kOnNvme && std::find(todo.begin(), todo.end(), p) == todo.end()) {
      todo.push_back(p);
    }
  }
  // Allocate every buffer first so a full pool starts nothing.
  std::vector<uint8_t*> bufs;
  for (Param* p : todo) {
    auto b = arena_->Allocate(p->numel * options_.element_bytes);
    if (!b.ok()) {
      for (uint8_t* x : bufs) arena_->Free(x);
      return b.status().WithContext("swap in " + std::to_string(todo.size()) + " params");
    }
    bufs.push_back(*b);
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    Param* p = todo[i];
    p->buf = bufs[i];
    p->io = space_->Read(p->swap_id, p->buf);
    ++p->io_gen;
    p->state = State::kReading;
    stats_.bytes_read += p->numel * options_.element_bytes;
  }
  return Status::Ok();
}

// Waits for p's outstanding I/O with the lock released; on success moves it to kResident.
Status ParamSwapper::FinishIo(ParamId id, Param& p, std::unique_lock<std::mutex>& lock) {
  if (p.state != State::kReading && p.state != State::kWriting) return Status::Ok();
  SwapFuture f = p.io;
  const State was = p.state;
  const uint64_t gen = p.io_gen;
  lock.unlock();
  Status s = f.Wait();
  lock.lock();
  auto it = params_.find(id);
  // Another thread finished this I/O (and maybe started a new one) meanwhile.
  if (it == params_.end() || it->second.state != was || it->second.io_gen != gen) return s;
  Param& q = it->second;
  if (!s.ok()) {
    if (was == State::kReading) {
      // The buffer holds garbage: give it back, the parameter is still only on NVMe.
      arena_->Free(q.buf);
      q.buf = nullptr;
      q.state = State::kOnNvme;
    } else {
      q.state = State::kResident;  // the data is still in the buffer: nothing is lost
      q.unsaved = true;
    }
    return s.WithContext("param " + std::to_string(id));
  }
  if (was == State::kWriting) q.unsaved = false;
  q.state = State::kResident;
  return Status::Ok();
}

Status ParamSwapper::WaitFor(std::span<const ParamId> ids, State io, bool need_swapped_in) {
  std::unique_lock lock(mu_);
  Status first;
  for (ParamId id : ids) {
    auto p = Find(id);
    if (!p.ok()) return p.status();
    if (need_swapped_in && (*p)->state == State::kOnNvme) {
      return FailedPreconditionError("param " + std::to_string(id) + " was not swapped in");
    }
    if ((*p)->state != io) continue;
    Status s = FinishIo(id, **p, lock);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status ParamSwapper::WaitIn(std::span<const ParamId> ids) {
  return WaitFor(ids, State::kReading, /*need_swapped_in=*/true);
}

Status ParamSwapper::WaitOut(std::span<const ParamId> ids) {
  return WaitFor(ids, State::kWriting, /*need_swapped_in=*/false);
}

Result<std::span<uint8_t>> ParamSwapper::Data(ParamId id) {
  std::lock_guard lock(mu_);
  STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
  if (p->state == State::kOnNvme || p->state == State::kReading) {
    return FailedPreconditionError(
        "param " + std::to_string(id) + " is not resident (" +
        (p->state == State::kReading ? "swap-in not waited" : "on NVMe") + ")");
  }
  return std::span<uint8_t>(p->buf, p->numel * options_.element_bytes);
}

Status ParamSwapper::AdoptCpuStorage(ParamId id, uint8_t* storage) {
  std::lock_guard lock(mu_);
  STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
  if (p->state != State::kCpu) {
    return FailedPreconditionError("param " + std::to_string(id) +
                                   " is not kept in CPU memory: its storage cannot move");
  }
  if (storage != p->buf) std::memcpy(storage, p->buf, p->numel * options_.element_bytes);
  p->buf = storage;
  std::vector<uint8_t>().swap(p->cpu);
  return Status::Ok();
}

Status ParamSwapper::ReadNvmeCopy(ParamId id, uint8_t* dst) {
  SwapId sid = 0;
  {
    std::lock_guard lock(mu_);
    STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
    if (p->state == State::kCpu) {
      return FailedPreconditionError("param " + std::to_string(id) +
                                     " is kept in CPU memory: it has no NVMe copy");
    }
    sid = p->swap_id;
  }
  Status s = space_->Read(sid, dst).Wait();
  if (s.ok()) {
    std::lock_guard lock(mu_);
    STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
    stats_.bytes_read += p->numel * options_.element_bytes;
  }
  return s.WithContext("param " + std::to_string(id) + ": read of its NVMe copy");
}

Status ParamSwapper::SwapOut(std::span<const ParamId> ids) {
  std::unique_lock lock(mu_);
  for (ParamId id : ids) {
    STRATA_ASSIGN_OR_RETURN(Param * p, Find(id));
    if (p->state == State::kCpu) continue;
    if (p->state == State::kWriting) {
      STRATA_RETURN_IF_ERROR(FinishIo(id, *p, lock));
      STRATA_ASSIGN_OR_RETURN(p, Find(id));
    }
    if (p->state != State::kResident) {
      return FailedPreconditionError("param " + std::to_string(id) +
                                     " has no buffer to swap out (swap it in or Allocate first)");
    }
    p->io = space_->Write(p->swap_id, p->buf);
    ++p->io_gen;
    p->state = State::kWriting;
    stats_.bytes_written += p->numel * options_.element_bytes;
  }
  return Status::Ok();
}

Status ParamSwapper::Release(std::span<const ParamId> ids) {
  std::unique_lock lock(mu_);
  Status first;
  for (ParamId id : ids) {
    auto found = Find(id);
    if (!found.ok()) return found.status();
    Param* p = *found;
    if (p->state == State::kCpu || p->state == State::kOnNvme) continue;
    Status s = FinishIo(id, *p, lock);
    if (!s.ok()) {
      if (first.ok()) first = s;
      continue;
    }
    p = &params_.at(id);
    if (p->state == State::kResident && p->unsaved) {
      if (first.ok()) {
        first = FailedPreconditionError("param " + std::to_string(id) +
                                        ": its last swap-out failed, so its buffer holds the only "
                                        "copy; it is kept until a SwapOut succeeds");
      }
      continue;
    }
    if (p->state == State::kResident) {
      arena_->Free(p->buf);
      p->buf = nullptr;
      p->state = State::kOnNvme;
    }
  }
  return first;
}

ParamSwapperStats ParamSwapper::stats() const {
  std::lock_guard lock(mu_);
  ParamSwapperStats s = stats_;
  s.buffer_bytes_used = arena_->used_bytes();
  s.buffer_bytes_peak = arena_->peak_bytes();
  return s;
}

}  // namespace strata
