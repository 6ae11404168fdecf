#include "swap/optimizer_swapper.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include "core/log.h"
#include "core/units.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

struct OptimizerSwapper::UpdateArena {
  explicit UpdateArena(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

OptimizerSwapper::OptimizerSwapper(const OptimizerSwapperOptions& o, AioHandle* aio,
                                   const CpuOptimizer* opt)
    : options_(o), aio_(aio), optimizer_(opt) {}

Result<std::unique_ptr<OptimizerSwapper>> OptimizerSwapper::Create(const OptimizerSwapperOptions& o,
                                                                   AioHandle* aio,
                                                                   const CpuOptimizer* optimizer) {
  if (optimizer == nullptr) return InvalidArgumentError("optimizer swapper: no optimizer");
  if (optimizer->kind() != OptimizerKind::kAdam) {
    return UnimplementedError(std::string("optimizer swapper: ") +
                              std::string(OptimizerKindName(optimizer->kind())) +
                              " state on NVMe is not supported yet (Adam/AdamW only)");
  }
  if (o.buffer_count < 1 || o.buffer_count > OptimizerSwapperOptions::kMaxBufferCount) {
    return InvalidArgumentError("offload_optimizer.buffer_count " + std::to_string(o.buffer_count) +
                                " must be in [1, " +
                                std::to_string(OptimizerSwapperOptions::kMaxBufferCount) + "]");
  }
  std::unique_ptr<OptimizerSwapper> s(new OptimizerSwapper(o, aio, optimizer));
  // The arena for pipelined updates (constructing one starts no thread until first use).
  if (o.update_threads >= 0) {
    if (optimizer->options().num_threads > 0) {
      // CpuOptimizer runs in its own arena when it has one, whatever arena calls it.
      LogWarning("optimizer swapper: update_threads " + std::to_string(o.update_threads) +
                 " not applied: the optimizer runs its own num_threads = " +
                 std::to_string(optimizer->options().num_threads));
    } else {
      const int threads = o.update_threads > 0 ? o.update_threads
                                               : std::max(1, tbb::info::default_concurrency() - 1);
      s->update_arena_ = std::make_unique<UpdateArena>(threads);
    }
  }
  STRATA_ASSIGN_OR_RETURN(s->space_, SwapSpace::Create(SwapSpaceOptionsFor(o, "optimizer"), aio));
  return s;
}

OptimizerSwapper::~OptimizerSwapper() {
  buffers_.clear();  // leases go back before their pools
  grad_buffers_.clear();
}

Result<int> OptimizerSwapper::AddSubGroup(size_t numel, int group) {
  if (numel == 0) return InvalidArgumentError("optimizer swapper: empty sub-group");
  if (group < 0 || group >= optimizer_->num_groups()) {
    return InvalidArgumentError("optimizer swapper: parameter group " + std::to_string(group) +
                                " does not exist (the optimizer has " +
                                std::to_string(optimizer_->num_groups()) + ")");
  }
  auto id = space_->Reserve(3 * PartBytes(numel));
  if (!id.ok()) return id.status().WithContext("sub-group " + std::to_string(groups_.size()));
  SwapId grad_id = 0;
  if (options_.swap_grads) {
    auto gid = space_->Reserve(numel * sizeof(float));
    if (!gid.ok()) {
      space_->Free(*id).IgnoreError();
      return gid.status().WithContext("gradients of sub-group " + std::to_string(groups_.size()));
    }
    grad_id = *gid;
  }
  groups_.push_back({numel, group, *id, grad_id});
  return static_cast<int>(groups_.size()) - 1;
}

size_t OptimizerSwapper::buffer_bytes() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b.size();
  return n;
}

Status OptimizerSwapper::EnsureBuffers() {
  size_t max_numel = 0;
  for (const SubGroup& g : groups_) max_numel = std::max(max_numel, g.numel);
  if (max_numel <= buffer_numel_ && buffers_.size() == options_.buffer_count) return Status::Ok();
  buffers_.clear();
  grad_buffers_.clear();
  pool_.reset();
  grad_pool_.reset();
  PinnedPoolOptions po;
  po.buffer_bytes = 3 * PartBytes(max_numel);
  po.buffer_count = options_.buffer_count;
  po.lock = options_.pin_memory;
  po.device = options_.device;
  po.budget = options_.budget;
  po.name = "offload_optimizer swap buffers";
  STRATA_ASSIGN_OR_RETURN(pool_, PinnedPool::Create(po));
  for (size_t i = 0; i < options_.buffer_count; ++i) buffers_.push_back(pool_->Acquire());
  // One slab: the buffers are its equal consecutive pieces, in whatever order they were leased.
  buffer_stride_ = pool_->buffer_bytes();
  region_ = buffers_.front().bytes();
  for (const PinnedBuffer& b : buffers_) region_ = std::min(region_, b.bytes());
  region_bytes_ = buffer_stride_ * buffers_.size();
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const PinnedBuffer& b = buffers_[i];
    STRATA_CHECK_MSG(b.bytes() >= region_ && b.bytes() + b.size() <= region_ + region_bytes_,
                     "optimizer swap buffer " + std::to_string(i) + " (" +
                         std::to_string(b.size()) + " bytes at offset " +
                         std::to_string(b.bytes() - region_) + ") is outside the " +
                         std::to_string(region_bytes_) + "-byte region of " +
                         std::to_string(buffers_.size()) + " buffers: they are not one slab");
  }
  if (options_.swap_grads) {
    po.buffer_bytes = PartBytes(max_numel);
    po.name = "offload_optimizer gradient buffers";
    STRATA_ASSIGN_OR_RETURN(grad_pool_, PinnedPool::Create(po));
    for (size_t i = 0; i < options_.buffer_count; ++i)
      grad_buffers_.push_back(grad_pool_->Acquire());
  }
  buffer_numel_ = max_numel;
  return Status::Ok();
}

Status OptimizerSwapper::Initialize(int sg, const float* params, const float* m, const float* v) {
  if (sg < 0 || sg >= num_sub_groups())
    return InvalidArgumentError("no sub-group " + std::to_string(sg));
  STRATA_RETURN_IF_ERROR(EnsureBuffers());
  const SubGroup& g = groups_[static_cast<size_t>(sg)];
  uint8_t* b = buffers_[0].bytes();
  const size_t part = PartBytes(g.numel), bytes = g.numel * sizeof(float);
  std::memcpy(b, params, bytes);
  if (m)
    std::memcpy(b + part, m, bytes);
  else
    std::memset(b + part, 0, bytes);
  if (v)
    std::memcpy(b + 2 * part, v, bytes);
  else
    std::memset(b + 2 * part, 0, bytes);
  return space_->Write(g.swap_id, b)
      .Wait()
      .WithContext("initialize sub-group " + std::to_string(sg));
}

SwapFuture OptimizerSwapper::WriteGrads(int sg, const float* grads) {
  if (!options_.swap_grads || sg < 0 || sg >= num_sub_groups()) {
    return SwapFuture::Failed(InvalidArgumentError(
        "WriteGrads(" + std::to_string(sg) +
        "): " + (options_.swap_grads ? "no such sub-group" : "swap_grads is off")));
  }
  if (grad_writes_.size() < groups_.size()) grad_writes_.resize(groups_.size());
  SwapFuture f = space_->Write(groups_[static_cast<size_t>(sg)].grad_id, grads);
  grad_writes_[static_cast<size_t>(sg)] = f;
  return f;
}

Status OptimizerSwapper::ReadState(int sg, float* params, float* m, float* v) {
  if (sg < 0 || sg >= num_sub_groups())
    return InvalidArgumentError("no sub-group " + std::to_string(sg));
  STRATA_RETURN_IF_ERROR(EnsureBuffers());
  const SubGroup& g = groups_[static_cast<size_t>(sg)];
  uint8_t* b = buffers_[0].bytes();
  STRATA_RETURN_IF_ERROR(
      space_->Read(g.swap_id, b).Wait().WithContext("read sub-group " + std::to_string(sg)));
  const size_t part = PartBytes(g.numel), bytes = g.numel * sizeof(float);
  if (params) std::memcpy(params, b, bytes);
  if (m) std::memcpy(m, b + part, bytes);
  if (v) std::memcpy(v, b + 2 * part, bytes);
  return Status::Ok();
}

OptimizerSwapper::StateView OptimizerSwapper::BufferState(int sg, int buffer) {
  return StateAt(sg, static_cast<size_t>(buffers_[static_cast<size_t>(buffer)].bytes() - region_));
}

Status OptimizerSwapper::CheckRange(const char* what, int sg, size_t offset) const {
  if (sg < 0 || sg >= num_sub_groups()) {
    return InvalidArgumentError(std::string("optimizer swapper: ") + what + " sub-group " +
                                std::to_string(sg) + " (there are " +
                                std::to_string(num_sub_groups()) + ")");
  }
  const uint64_t need = state_bytes(sg);
  if (offset % 4096 != 0 || offset > region_bytes_ || need > region_bytes_ - offset) {
    return InvalidArgumentError(
        std::string("optimizer swapper: ") + what + " sub-group " + std::to_string(sg) +
        " at byte " + std::to_string(offset) + " of the buffers (" + std::to_string(need) +
        " bytes from a 4 KiB " + "multiple within " + std::to_string(region_bytes_) + ")");
  }
  return Status::Ok();
}

OptimizerSwapper::StateView OptimizerSwapper::StateAt(int sg, size_t offset) {
  const Status range = CheckRange("state of", sg, offset);
  STRATA_CHECK_MSG(range.ok(), range.ToString());  // callers place states within the region
  StateView v;
  uint8_t* b = region_ + offset;
  const size_t part = PartBytes(groups_[static_cast<size_t>(sg)].numel);
  v.params = reinterpret_cast<float*>(b);
  v.exp_avg = reinterpret_cast<float*>(b + part);
  v.exp_avg_sq = reinterpret_cast<float*>(b + 2 * part);
  return v;
}

namespace {

SwapFuture BadBuffer(const char* what, int sg, int buffer, int sub_groups, int buffers) {
  return SwapFuture::Failed(InvalidArgumentError(
      std::string("optimizer swapper: ") + what + " sub-group " + std::to_string(sg) + " " +
      (what[0] == 'r' ? "into" : "from") + " buffer " + std::to_string(buffer) + " (" +
      std::to_string(sub_groups) + " sub-groups, " + std::to_string(buffers) + " buffers)"));
}

}  // namespace

SwapFuture OptimizerSwapper::ReadAsync(int sg, int buffer) { return ReadAsync(sg, buffer, false); }

SwapFuture OptimizerSwapper::ReadAsync(int sg, int buffer, bool deferred) {
  if (sg < 0 || sg >= num_sub_groups() || buffer < 0 || buffer >= num_buffers()) {
    return BadBuffer("read of", sg, buffer, num_sub_groups(), num_buffers());
  }
  return ReadAt(sg, static_cast<size_t>(buffers_[static_cast<size_t>(buffer)].bytes() - region_),
                deferred);
}

SwapFuture OptimizerSwapper::ReadAt(int sg, size_t offset, bool deferred) {
  if (Status r = CheckRange("read of", sg, offset); !r.ok()) return SwapFuture::Failed(r);
  return space_->Read(groups_[static_cast<size_t>(sg)].swap_id, region_ + offset, !deferred);
}

Status OptimizerSwapper::VerifyBlocks(int sg, int buffer, size_t first, size_t count,
                                      uint64_t* sums) const {
  if (sg < 0 || sg >= num_sub_groups() || buffer < 0 || buffer >= num_buffers()) {
    return InvalidArgumentError("optimizer swapper: verify of sub-group " + std::to_string(sg) +
                                " in buffer " + std::to_string(buffer) + " (" +
                                std::to_string(num_sub_groups()) + " sub-groups, " +
                                std::to_string(num_buffers()) + " buffers)");
  }
  return VerifyBlocksAt(
      sg, static_cast<size_t>(buffers_[static_cast<size_t>(buffer)].bytes() - region_), first,
      count, sums);
}

Status OptimizerSwapper::VerifyBlocksAt(int sg, size_t offset, size_t first, size_t count,
                                        uint64_t* sums) const {
  STRATA_RETURN_IF_ERROR(CheckRange("verify of", sg, offset));
  return space_->VerifyBlocks(groups_[static_cast<size_t>(sg)].swap_id, region_ + offset, first,
                              count, sums);
}

SwapFuture OptimizerSwapper::WriteAsync(int sg, int buffer) {
  if (sg < 0 || sg >= num_sub_groups() || buffer < 0 || buffer >= num_buffers()) {
    return BadBuffer("write of", sg, buffer, num_sub_groups(), num_buffers());
  }
  return WriteAt(sg, static_cast<size_t>(buffers_[static_cast<size_t>(buffer)].bytes() - region_));
}

SwapFuture OptimizerSwapper::WriteAsync(int sg, int buffer, std::vector<uint64_t> block_sums) {
  if (sg < 0 || sg >= num_sub_groups() || buffer < 0 || buffer >= num_buffers()) {
    return BadBuffer("write of", sg, buffer, num_sub_groups(), num_buffers());
  }
  return WriteAt(sg, static_cast<size_t>(buffers_[static_cast<size_t>(buffer)].bytes() - region_),
                 std::move(block_sums));
}

SwapFuture OptimizerSwapper::WriteAt(int sg, size_t offset) {
  if (Status r = CheckRange("write of", sg, offset); !r.ok()) return SwapFuture::Failed(r);
  return space_->Write(groups_[static_cast<size_t>(sg)].swap_id, region_ + offset);
}

SwapFuture OptimizerSwapper::WriteAt(int sg, size_t offset, std::vector<uint64_t> block_sums) {
  if (Status r = CheckRange("write of", sg, offset); !r.ok()) return SwapFuture::Failed(r);
  return space_->Write(groups_[static_cast<size_t>(sg)].swap_id, region_ + offset,
                       std::move(block_sums));
}

// Note [Optimizer step pipeline]
// Sub-group i uses buffer i % B. Reads run `lookahead` sub-groups ahead of the update
// (B - 2 with pipeline_read: one buffer is being updated, one is being written back), and a read
// into a buffer first waits for that buffer's previous write. Without pipeline_write each write
// is waited for right away. Every path out of Step() drains all I/O first, so no buffer is
// reused or freed while the kernel may still touch it.
Status OptimizerSwapper::Step(const std::function<SubGroupIo(int)>& io, const StepOptions& opts) {
  STRATA_RETURN_IF_ERROR(EnsureBuffers());
  last_ = OptimizerStepStats();
  const auto t_start = Clock::now();
  const int n = num_sub_groups();
  const int nb = static_cast<int>(buffers_.size());
  int lookahead = options_.pipeline_read ? std::max(0, nb - 2) : 0;
  const bool pipelined = options_.pipeline_read || options_.pipeline_write;
  struct Slot {
    SwapFuture read, grad_read, write;
    bool reading = false, writing = false;
    int sg = -1;
  };
  std::vector<Slot> slots(static_cast<size_t>(nb));
  Status error;
  auto wait_write = [&](Slot& s) {
    if (!s.writing) return;
    auto t = Clock::now();
    Status w = s.write.Wait();
    last_.write_wait_ms += Ms(t, Clock::now());
    s.writing = false;
    if (!w.ok() && error.ok()) {
      error = w.WithContext("write sub-group " + std::to_string(s.sg) +
                            " (its state on NVMe is torn until Initialize rewrites it)");
    }
  };
  auto start_read = [&](int i) {
    Slot& s = slots[static_cast<size_t>(i % nb)];
    wait_write(s);
    if (!error.ok()) return;
    s.sg = i;
    s.read = space_->Read(groups_[static_cast<size_t>(i)].swap_id,
                          buffers_[static_cast<size_t>(i % nb)].data());
    s.reading = true;
    last_.bytes_read += 3 * PartBytes(groups_[static_cast<size_t>(i)].numel);
    if (options_.swap_grads) {
      if (static_cast<size_t>(i) < grad_writes_.size()) {
        // The gradients must be on disk before they are read back.
        Status w = grad_writes_[static_cast<size_t>(i)].Wait();
        grad_writes_[static_cast<size_t>(i)] = SwapFuture();
        if (!w.ok()) {
          if (error.ok())
            error = w.WithContext("write gradients of sub-group " + std::to_string(i));
          return;
        }
      }
      s.grad_read = space_->Read(groups_[static_cast<size_t>(i)].grad_id,
                                 grad_buffers_[static_cast<size_t>(i % nb)].data());
      last_.bytes_read += groups_[static_cast<size_t>(i)].numel * sizeof(float);
    }
  };
  int next_read = 0;
  for (int i = 0; i < n && error.ok(); ++i) {
    while (next_read <= std::min(n - 1, i + lookahead) && error.ok()) start_read(next_read++);
    if (!error.ok()) break;
    Slot& s = slots[static_cast<size_t>(i % nb)];
    auto t = Clock::now();
    Status r = s.read.Wait();
    if (options_.swap_grads) {
      Status rg = s.grad_read.Wait();
      if (r.ok() && !rg.ok()) r = rg.WithContext("gradients");
    }
    last_.read_wait_ms += Ms(t, Clock::now());
    s.reading = false;
    if (!r.ok()) {
      error = r.WithContext("read sub-group " + std::to_string(i));
      break;
    }
    const SubGroup& g = groups_[static_cast<size_t>(i)];
    const SubGroupIo sio = io(i);
    uint8_t* b = buffers_[static_cast<size_t>(i % nb)].bytes();
    const size_t part = PartBytes(g.numel);
    StepTensors tensors;
    tensors.numel = g.numel;
    tensors.params = reinterpret_cast<float*>(b);
    tensors.exp_avg = reinterpret_cast<float*>(b + part);
    tensors.exp_avg_sq = reinterpret_cast<float*>(b + 2 * part);
    tensors.grads = sio.grads;
    tensors.grad_dtype = sio.grad_dtype;
    if (sio.grads == nullptr && options_.swap_grads) {
      tensors.grads = grad_buffers_[static_cast<size_t>(i % nb)].data();
      tensors.grad_dtype = DType::kFloat32;
    }
    tensors.param_copy = sio.param_copy;  // fused into the update, fp32 too
    tensors.param_copy_dtype = sio.param_copy_dtype;
    auto hp = optimizer_->hyperparams(g.group);
    if (!hp.ok()) {
      error = hp.status();
      break;
    }
    t = Clock::now();
    Status u;
    if (pipelined && update_arena_ != nullptr) {
      update_arena_->arena.execute([&] { u = optimizer_->StepAt(*hp, step_ + 1, tensors, opts); });
    } else {
      u = optimizer_->StepAt(*hp, step_ + 1, tensors, opts);
    }
    last_.update_ms += Ms(t, Clock::now());
    if (!u.ok()) {
      error = u.WithContext("update sub-group " + std::to_string(i));
      break;
    }
    s.write = space_->Write(g.swap_id, b);
    s.writing = true;
    last_.bytes_written += 3 * part;
    if (!options_.pipeline_write) wait_write(s);
  }
  // Drain: reads issued ahead and writes still in flight.
  for (Slot& s : slots) {
    if (s.reading) {
      s.read.Wait().IgnoreError();
      if (options_.swap_grads) s.grad_read.Wait().IgnoreError();
    }
    s.reading = false;
    wait_write(s);
  }
  last_.total_ms = Ms(t_start, Clock::now());
  if (!error.ok()) return error;
  ++step_;
  return Status::Ok();
}

}  // namespace strata
