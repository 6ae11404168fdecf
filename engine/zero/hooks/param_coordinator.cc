#include "engine/zero/hooks/param_coordinator.h"

#include <algorithm>

#include "core/clock.h"
#include "core/log.h"

namespace strata {
namespace {

// FNV-1a, 64 bits.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  template <typename T>
  void AddValue(T v) {
    Add(&v, sizeof(v));
  }
};

}  // namespace

ParamCoordinator::ParamCoordinator(const ParamCoordinatorOptions& o, Gatherer* gatherer)
    : o_(o), g_(gatherer), kept_(o.numel.size(), 0) {}

std::string ParamCoordinator::Describe(const nn::Module* m, nn::HookPoint p) {
  if (m == nullptr) return "the end of the pass";
  return (m->name().empty() ? std::string("<root>") : m->name()) + " " + nn::HookPointName(p);
}

Status ParamCoordinator::Step(nn::HookPoint point, const nn::Module& module,
                              std::span<const size_t> params) {
  const double now = SteadyNowMs();
  if (!in_pass_) {
    in_pass_ = true;
    pos_ = next_prefetch_ = next_read_ = 0;
    ahead_numel_ = 0;
    pass_begin_ms_ = now;
    if (o_.store != nullptr) last_read_bytes_ = o_.store->nvme_read_bytes();
  } else if (mode_ == Mode::kReplay && pos_ > 0 && pos_ - 1 < entry_ms_.size()) {
    double& ms = entry_ms_[pos_ - 1];
    ms = ms < 0 ? now - last_hook_ms_ : 0.5 * ms + 0.5 * (now - last_hook_ms_);
  }
  last_hook_ms_ = now;
  switch (mode_) {
    case Mode::kRecord: {
      Entry e{&module, point, {params.begin(), params.end()}, 0};
      for (size_t i : params) {
        if (!g_->IsPersistent(i)) e.numel += o_.numel[i];
      }
      trace_.push_back(std::move(e));
      ++pos_;
      return Status::Ok();
    }
    case Mode::kReplay: {
      const Entry* e = pos_ < trace_.size() ? &trace_[pos_] : nullptr;
      if (e == nullptr || e->module != &module || e->point != point) {
        return Invalidate(e == nullptr ? Describe(nullptr, point) : Describe(e->module, e->point),
                          Describe(&module, point));
      }
      ++pos_;
      return Status::Ok();
    }
    case Mode::kInvalid:
      return Status::Ok();
  }
  return Status::Ok();
}

Status ParamCoordinator::BeforeGather(nn::HookPoint point, const nn::Module& module,
                                      std::span<const size_t> params) {
  STRATA_RETURN_IF_ERROR(Step(point, module, params));
  if (mode_ != Mode::kReplay || o_.prefetch_bucket_numel <= 0) return Status::Ok();
  for (size_t i : params) {
    if (!g_->IsPersistent(i) && !g_->IsLive(i)) ++stats_.misses;
  }
  return Status::Ok();
}

Status ParamCoordinator::AfterGather(std::span<const size_t> params) {
  if (mode_ != Mode::kReplay) return Status::Ok();
  // The module holds its parameters now: drop the holds taken for it ahead.
  const size_t k = pos_ - 1;
  const bool prefetched = k < prefetched_.size() && prefetched_[k] != 0;
  for (size_t i : params) {
    if (g_->IsPersistent(i)) continue;
    bool hit = false;
    if (prefetched) {
      STRATA_RETURN_IF_ERROR(g_->ReleaseParam(i));
      hit = true;
    }
    if (kept_[i] != 0) {
      kept_[i] = 0;
      STRATA_RETURN_IF_ERROR(g_->ReleaseParam(i));
      hit = true;
    }
    if (hit) ++stats_.hits;
  }
  if (prefetched) {
    prefetched_[k] = 0;
    ahead_numel_ -= trace_[k].numel;
  }
  STRATA_RETURN_IF_ERROR(PrefetchAhead());
  ReadAhead();
  return Status::Ok();
}

// Note [Room for the bucket]: with the default reuse distance (1e9 elements) every parameter
// released in the forward is used again within it (in the backward), so keeping while the live
// elements stay within stage3_max_live_parameters filled max_live with the first layers'
// parameters — the ones needed last — and PrefetchAhead, bounded by the same max_live, had no
// room left: every module gathered its own, the gather stream in lock step with compute (the
// bench/overlap trace: 45 misses a step in the coordinator test, the balanced forward 86 ms ->
// 66 ms with the rule below). A parameter is therefore kept only while the live elements plus a
// full prefetch bucket stay within max_live: prefetch first, keeping with what room is left.
// Nearby reuse needs no keeping: the prefetch holds a parameter its next entries use.
Status ParamCoordinator::BeforeRelease(nn::HookPoint point, const nn::Module& module,
                                       std::span<const size_t> params) {
  STRATA_RETURN_IF_ERROR(Step(point, module, params));
  if (mode_ != Mode::kReplay || o_.prefetch_bucket_numel <= 0) return Status::Ok();
  const uint64_t reuse = static_cast<uint64_t>(std::max<int64_t>(o_.max_reuse_distance_numel, 0));
  const uint64_t max_live = static_cast<uint64_t>(std::max<int64_t>(o_.max_live_numel, 0));
  const uint64_t bucket = static_cast<uint64_t>(o_.prefetch_bucket_numel);
  for (size_t i : params) {
    if (g_->IsPersistent(i) || kept_[i] != 0) continue;
    const size_t next = NextUse(i, pos_ - 1);
    if (next >= trace_.size() || cum_[next] - cum_[pos_] > reuse) continue;
    // Note [Room for the bucket]; Note [Next fresh gather]
    if (g_->live_numel() + bucket > max_live && !NothingFreshBefore(next)) continue;
    STRATA_RETURN_IF_ERROR(g_->GatherParam(i));  // live already: one more hold, no copy
    kept_[i] = 1;
    ++stats_.kept;
  }
  return Status::Ok();
}

// Note [Next fresh gather]
// The room rule above gives way in one case: when every entry before the parameter's next use
// runs on parameters live now (or persistent), releasing it would make it the next fresh gather,
// so keeping it takes no room the prefetch would have used first. That is the turn from forward
// to backward: the last decoder layer's parameters, released after its forward, are used again
// right after lm_head's forward and backward, which hold lm_head only; in bench/overlap they
// were released and gathered again (12.6 MB, ~4 ms of a 3 GB/s link) a few milliseconds later.
bool ParamCoordinator::NothingFreshBefore(size_t next) const {
  for (size_t k = pos_; k < next && k < trace_.size(); ++k) {
    for (size_t i : trace_[k].params) {
      if (!g_->IsPersistent(i) && !g_->IsLive(i)) return false;
    }
  }
  return true;
}

size_t ParamCoordinator::NextUse(size_t param, size_t pos) const {
  const std::vector<size_t>& u = uses_[param];
  auto it = std::upper_bound(u.begin(), u.end(), pos);
  return it == u.end() ? trace_.size() : *it;
}

// Note [A bucket's reads together]
// Each gather of a shard on NVMe waits for its read (ParamStore::Acquire), so gathering the
// entries of a prefetch bucket one after another read their shards one at a time: the aio queue
// held one shard's pieces (a 1 MiB projection of bench/overlap: one piece of a queue of eight)
// while the rest waited for the engine's thread. The entries the bucket will take are therefore
// found first, by the same rule on the live elements they will make, and every shard of theirs
// not live yet is handed to ParamStore::Prefetch in one batch, in the order they will be gathered;
// then the gathers run and each waits only for its own read, the others in flight meanwhile.
// The gathers themselves, and so every collective and every result, are what they were.
void ParamCoordinator::ReadBucket(size_t from, uint64_t bucket, uint64_t max_live) {
  if (o_.store == nullptr || o_.store->tier() != Tier::kNvme) return;
  std::vector<size_t>& batch = read_batch_;
  batch.clear();
  uint64_t ahead = ahead_numel_, live = g_->live_numel();
  for (size_t k = from; k < trace_.size(); ++k) {
    const Entry& e = trace_[k];
    if (!IsPre(e.point) || e.numel == 0) continue;
    if (ahead >= bucket) break;
    const size_t first = batch.size();
    uint64_t fresh = 0;
    for (size_t i : e.params) {
      if (g_->IsPersistent(i) || g_->IsLive(i)) continue;
      if (std::find(batch.begin(), batch.end(), i) != batch.end()) continue;
      fresh += o_.numel[i];
      batch.push_back(i);
    }
    if (live + fresh > max_live) {
      batch.resize(first);
      break;
    }
    live += fresh;
    ahead += e.numel;
  }
  // Best effort, as ReadAhead: a failed read is reported by the gather's Acquire.
  if (!batch.empty() && o_.store->Prefetch(batch).ok()) {
    for (size_t i : batch) stats_.read_ahead_bytes += o_.shard_bytes[i];
  }
}

Status ParamCoordinator::PrefetchAhead() {
  if (o_.prefetch_bucket_numel <= 0) return Status::Ok();
  const uint64_t bucket = static_cast<uint64_t>(o_.prefetch_bucket_numel);
  const uint64_t max_live = static_cast<uint64_t>(std::max<int64_t>(o_.max_live_numel, 0));
  size_t k = std::max(next_prefetch_, pos_);
  ReadBucket(k, bucket, max_live);  // Note [A bucket's reads together]
  for (; k < trace_.size(); ++k) {
    const Entry& e = trace_[k];
    if (!IsPre(e.point) || e.numel == 0) continue;
    // DeepSpeed's rule: keep adding while under the bucket (the last may pass it by one module).
    if (ahead_numel_ >= bucket) break;
    uint64_t fresh = 0;
    for (size_t i : e.params) {
      if (!g_->IsPersistent(i) && !g_->IsLive(i)) fresh += o_.numel[i];
    }
    if (g_->live_numel() + fresh > max_live) break;
    for (size_t i : e.params) {
      if (g_->IsPersistent(i)) continue;
      const bool was_live = g_->IsLive(i);
      STRATA_RETURN_IF_ERROR(g_->GatherParam(i));
      if (!was_live) stats_.prefetched_bytes += o_.numel[i] * o_.dtype_bytes;
    }
    prefetched_[k] = 1;
    ahead_numel_ += e.numel;
  }
  next_prefetch_ = k;
  return Status::Ok();
}

// Note [Read-ahead]: a shard on NVMe must be read before its gather. The reads for the entries
// from here to entry j take (their bytes / read bandwidth); entry j starts after the modules in
// between have run (their measured durations). Entry j's read is issued now when the reads
// before it, its own included, would otherwise not finish in time (with one module to spare),
// so reads are spread over the trace as the bandwidth needs them, not stopped at the first
// NVMe-resident parameter. At most stage3_max_live_parameters shard elements are read ahead.
// With eager_read_ahead (forward-only passes: ZeRO-Inference) every entry within that cap is
// issued at once: nothing is written back between passes, so reading early evicts nothing the
// pass still needs, and a deeper queue absorbs the compute's jitter. Measured with
// bench/generate on an idle machine (batch 1, 212 MiB of weights from NVMe, alternated runs):
// 0.090 / 0.081 s a token eager, 0.096 / 0.096 s just in time.
//
// Note [A full queue ahead]
// Just in time by the module durations was still one read at a time: the deadline it aims at is
// when a module runs, but PrefetchAhead gathers a module a bucket earlier, and that gather waits
// for the read; the estimate often asked for no read before the next hook, so that hook's
// PrefetchAhead read its one new entry synchronously, the aio queue holding one shard's pieces
// (bench/overlap --sizes nvme --param-buffer-size 4200000: most of a forward's shards read in a
// batch of their own, one to three 1 MiB pieces of a queue of eight). So the entries after the
// gathered ones are also read while the shard bytes read ahead and not yet gathered are fewer than
// the aio queue holds (min_read_ahead_bytes: queue_depth x block_size x threads): when a gather
// waits for its read, the reads behind it keep the queue full. The cap is on each call's new
// reads, as before.
void ParamCoordinator::ReadAhead() {
  if (o_.store == nullptr || o_.store->tier() != Tier::kNvme) return;
  std::vector<size_t>& batch = read_batch_;
  batch.clear();
  double until_ms = 0, read_ms = 0;
  uint64_t ahead_bytes = 0;  // read ahead and not gathered: issued before or now
  uint64_t new_bytes = 0;    // issued now (what the cap bounds)
  const uint64_t cap =
      static_cast<uint64_t>(std::max<int64_t>(o_.max_live_numel, 0)) * o_.dtype_bytes;
  const double spare_ms = pos_ > 0 && pos_ - 1 < entry_ms_.size() ? entry_ms_[pos_ - 1] : 0;
  size_t k = pos_;
  for (; k < trace_.size(); ++k) {
    if (k > pos_) until_ms += std::max(entry_ms_[k - 1], 0.0);
    const Entry& e = trace_[k];
    if (!IsPre(e.point)) continue;
    uint64_t bytes = 0;
    for (size_t i : e.params) {
      if (!g_->IsPersistent(i) && !g_->IsLive(i)) bytes += o_.shard_bytes[i];
    }
    read_ms += static_cast<double>(bytes) / read_bytes_per_ms_;
    // Note [A full queue ahead]: the reads not yet gathered fill the aio queue at least.
    const bool fill_queue = ahead_bytes < o_.min_read_ahead_bytes;
    const bool needed_now =
        o_.eager_read_ahead || k < next_prefetch_ || fill_queue || read_ms + spare_ms >= until_ms;
    if (!needed_now || new_bytes + bytes > cap) break;
    ahead_bytes += bytes;
    if (k < next_read_) continue;  // issued already in this pass
    new_bytes += bytes;
    for (size_t i : e.params) {
      // In the order of use (the aio queue is first in, first out: the backward's reads are
      // its parameters from the last down), each once.
      if (g_->IsPersistent(i) || g_->IsLive(i)) continue;
      if (std::find(batch.begin(), batch.end(), i) == batch.end()) batch.push_back(i);
    }
  }
  next_read_ = std::max(next_read_, k);
  if (batch.empty()) return;
  // A failed read-ahead is not an error here: the gather's Acquire reads again and reports it.
  if (o_.store->Prefetch(batch).ok()) {
    for (size_t i : batch) stats_.read_ahead_bytes += o_.shard_bytes[i];
  }
}

Status ParamCoordinator::ReleaseAll() {
  for (size_t k = 0; k < prefetched_.size(); ++k) {
    if (prefetched_[k] == 0) continue;
    prefetched_[k] = 0;
    for (size_t i : trace_[k].params) {
      if (!g_->IsPersistent(i)) STRATA_RETURN_IF_ERROR(g_->ReleaseParam(i));
    }
  }
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (kept_[i] == 0) continue;
    kept_[i] = 0;
    STRATA_RETURN_IF_ERROR(g_->ReleaseParam(i));
  }
  ahead_numel_ = 0;
  return Status::Ok();
}

Status ParamCoordinator::Invalidate(const std::string& expected, const std::string& got) {
  // Holds are released in stream order (the gathers they took are enqueued before), so nothing
  // in flight is freed under a reader; NVMe reads already issued complete in the store.
  STRATA_RETURN_IF_ERROR(ReleaseAll());
  mode_ = Mode::kInvalid;
  ++stats_.invalidations;
  stats_.replaying = false;
  LogOnce(logged_, LogLevel::kWarning,
          "stage 3: module order changed at step " + std::to_string(stats_.passes + 1) +
              " (expected " + expected + ", got " + got + "); re-recording");
  return Status::Ok();
}

void ParamCoordinator::Finalize() {
  cum_.assign(trace_.size() + 1, 0);
  uses_.assign(o_.numel.size(), {});
  for (size_t k = 0; k < trace_.size(); ++k) {
    const Entry& e = trace_[k];
    cum_[k + 1] = cum_[k] + (IsPre(e.point) ? e.numel : 0);
    if (!IsPre(e.point)) continue;
    for (size_t i : e.params) uses_[i].push_back(k);
  }
  prefetched_.assign(trace_.size(), 0);
  entry_ms_.assign(trace_.size(), -1.0);
}

Status ParamCoordinator::CheckAcrossRanks() {
  const int world = o_.comm->world_size();
  if (world <= 1) return Status::Ok();
  Fnv f;
  f.AddValue<uint64_t>(trace_.size());
  for (const Entry& e : trace_) {
    f.Add(e.module->name().data(), e.module->name().size());
    f.AddValue<int>(static_cast<int>(e.point));
    for (size_t i : e.params) f.AddValue<uint64_t>(i);
  }
  // The hash as four 16-bit pieces, each exact in fp32, all-gathered in place.
  constexpr size_t kPieces = 4;
  std::vector<float> all(kPieces * static_cast<size_t>(world), 0.0f);
  float* mine = all.data() + kPieces * static_cast<size_t>(o_.comm->rank());
  for (size_t j = 0; j < kPieces; ++j) mine[j] = static_cast<float>((f.h >> (16 * j)) & 0xffff);
  STRATA_ASSIGN_OR_RETURN(void* buf, o_.device->Allocate(all.size() * sizeof(float)));
  float* dmine = static_cast<float*>(buf) + kPieces * static_cast<size_t>(o_.comm->rank());
  Status s = o_.compute.CopyAsync(dmine, mine, kPieces * sizeof(float), CopyKind::kHostToDevice);
  if (s.ok()) {
    s = o_.comm->AllGather(o_.compute, dmine, buf, all.size(), DType::kFloat32, nullptr);
  }
  if (s.ok()) {
    s = o_.compute.CopyAsync(all.data(), buf, all.size() * sizeof(float), CopyKind::kDeviceToHost);
  }
  if (s.ok()) s = o_.compute.Synchronize();
  o_.device->Free(buf).IgnoreError();
  STRATA_RETURN_IF_ERROR(s.WithContext("stage 3: checking the module order across ranks"));
  for (int r = 1; r < world; ++r) {
    if (!std::equal(all.begin(), all.begin() + kPieces, all.begin() + kPieces * r)) {
      return FailedPreconditionError(
          "stage 3: the module order of the first step differs between ranks: rank " +
          std::to_string(r) + " ran its modules in another order than rank 0 (" +
          std::to_string(trace_.size()) + " hooks on rank " + std::to_string(o_.comm->rank()) +
          "); every rank must run the same modules in the same order (stage 3 gathers are "
          "collectives)");
    }
  }
  return Status::Ok();
}

Status ParamCoordinator::EndPass() {
  if (!in_pass_) return Status::Ok();
  STRATA_RETURN_IF_ERROR(ReleaseAll());
  in_pass_ = false;
  if (o_.store != nullptr && o_.store->tier() == Tier::kNvme) {
    const double ms = std::max(SteadyNowMs() - pass_begin_ms_, 1e-3);
    const uint64_t bytes = o_.store->nvme_read_bytes() - last_read_bytes_;
    if (bytes > 0) {
      read_bytes_per_ms_ = 0.5 * read_bytes_per_ms_ + 0.5 * static_cast<double>(bytes) / ms;
    }
  }
  switch (mode_) {
    case Mode::kRecord:
      Finalize();
      if (Status s = CheckAcrossRanks(); !s.ok()) {
        trace_.clear();
        return s;
      }
      mode_ = Mode::kReplay;
      stats_.replaying = true;
      break;
    case Mode::kReplay:
      if (pos_ != trace_.size()) {
        STRATA_RETURN_IF_ERROR(
            Invalidate(Describe(trace_[pos_].module, trace_[pos_].point), "the end of the pass"));
      }
      break;
    case Mode::kInvalid:
      break;
  }
  if (mode_ == Mode::kInvalid) {
    mode_ = Mode::kRecord;
    trace_.clear();
  }
  pos_ = 0;
  ++stats_.passes;
  return Status::Ok();
}

}  // namespace strata
