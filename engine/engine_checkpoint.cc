// Engine::SaveCheckpoint / LoadCheckpoint: this rank's partition to and from the files of
// engine/checkpoint/checkpoint.h, the ranks agreeing at each phase so that all succeed or all fail.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

namespace {

std::string DTypeText(DType d) {
  return d == DType::kBFloat16 ? "bf16" : d == DType::kFloat16 ? "fp16" : "fp32";
}

std::string OptimizerText(OptimizerType t) {
  switch (t) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
      return "adam";
    case OptimizerType::kAdagrad:
      return "adagrad";
    case OptimizerType::kLion:
      return "lion";
  }
  return "?";
}

// Every rank learns whether any rank failed (a max all-reduce of one flag, which is also a
// barrier). Returns this rank's own error, or Aborted if only another rank failed.
Status Agree(Communicator& comm, const Stream& stream, float* device_flag, const Status& local,
             const std::string& phase) {
  if (comm.world_size() == 1) return local;
  float flag = local.ok() ? 0.0f : 1.0f;
  STRATA_RETURN_IF_ERROR(
      stream.CopyAsync(device_flag, &flag, sizeof(float), CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      comm.AllReduce(stream, device_flag, device_flag, 1, DType::kFloat32, ReduceOp::kMax, nullptr)
          .WithContext("checkpoint: " + phase));
  STRATA_RETURN_IF_ERROR(
      stream.CopyAsync(&flag, device_flag, sizeof(float), CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(stream.Synchronize());
  if (!local.ok()) return local;
  if (flag != 0.0f) return AbortedError("checkpoint: another rank failed while " + phase);
  return Status::Ok();
}

// The alignment the layout was made with (engine.cc's): the largest power of two up to 4096
// that divides every slot's offset and the partition's length, confirmed by rebuilding the
// layout with it, so the manifest lets a reader recompute every rank's layout exactly.
uint64_t AlignNumelOf(const PartitionLayout& layout) {
  std::vector<size_t> numels;
  for (const ShardSlice& s : layout.slices()) numels.push_back(s.numel);
  for (size_t align = 4096; align > 1; align /= 2) {
    Result<PartitionLayout> l =
        PartitionLayout::Create(numels, layout.world(), layout.rank(), align);
    if (!l.ok() || l->partition_numel() != layout.partition_numel()) continue;
    bool same = true;
    for (size_t i = 0; same && i < numels.size(); ++i) {
      same = l->slices()[i].flat_offset == layout.slices()[i].flat_offset;
    }
    if (same) return align;
  }
  return 1;
}

// Fills [begin, end) of the partition's master, exp_avg, exp_avg_sq (host buffers of end - begin
// floats each).
using ChunkFn = std::function<Status(size_t begin, size_t end, float* m, float* v, float* s)>;

std::string Hex16(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status PwriteAll(int fd, const void* data, size_t bytes, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::pwrite(fd, p, bytes, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      return IoError("checkpoint: write " + path + " at offset " + std::to_string(offset) + ": " +
                     std::strerror(errno));
    }
    p += w;
    bytes -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

// The safetensors header of a shard (the layout WriteCheckpointShard writes: three F32 tensors
// of n elements, one after another, checksums in __metadata__).
std::string ShardHeader(const std::string& tag, int rank, size_t n, const uint64_t hashes[3]) {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> metadata = {
      {"format", "strata-zero-shard"}, {"rank", std::to_string(rank)}, {"tag", tag}};
  const uint64_t bytes = uint64_t{n} * sizeof(float);
  for (int a = 0; a < 3; ++a) {
    const std::string name(CheckpointArrayName(static_cast<CheckpointArray>(a)));
    metadata["xxh3." + name] = Hex16(hashes[a]);
    header[name] = {{"dtype", "F32"},
                    {"shape", {static_cast<int64_t>(n)}},
                    {"data_offsets", {a * bytes, (a + 1) * bytes}}};
  }
  header["__metadata__"] = metadata;
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  return head + json;
}

// WriteCheckpointShard's file, streamed: `chunks` (in order, covering [0, n)) are fetched one at
// a time and written in place, so a state that is not in RAM (NVMe, or device memory the host
// cannot address) is never copied whole. Durable as WriteCheckpointShard: a temporary file,
// fsynced, renamed.
Status WriteShardStreaming(const std::string& tag_dir, const std::string& tag, int rank, size_t n,
                           const std::vector<std::pair<size_t, size_t>>& chunks,
                           const ChunkFn& fetch) {
  const std::string path =
      (std::filesystem::path(tag_dir) / CheckpointShardFileName(rank)).string();
  const std::string tmp = path + ".tmp";
  const uint64_t zero[3] = {0, 0, 0};
  const uint64_t data_start = ShardHeader(tag, rank, n, zero).size();  // hashes are fixed width
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("checkpoint: create " + tmp + ": " + std::strerror(errno));
  XXH3_state_t* states[3] = {XXH3_createState(), XXH3_createState(), XXH3_createState()};
  for (XXH3_state_t* st : states) XXH3_64bits_reset(st);
  Status status;
  std::vector<float> buf;
  for (const auto& [begin, end] : chunks) {
    const size_t len = end - begin;
    buf.resize(3 * len);
    status = fetch(begin, end, buf.data(), buf.data() + len, buf.data() + 2 * len);
    for (int a = 0; status.ok() && a < 3; ++a) {
      const float* src = buf.data() + a * len;
      XXH3_64bits_update(states[a], src, len * sizeof(float));
      status = PwriteAll(fd, src, len * sizeof(float),
                         data_start + (static_cast<uint64_t>(a) * n + begin) * sizeof(float), tmp);
    }
    if (!status.ok()) break;
  }
  uint64_t hashes[3];
  for (int a = 0; a < 3; ++a) {
    hashes[a] = XXH3_64bits_digest(states[a]);
    XXH3_freeState(states[a]);
  }
  if (status.ok()) {
    const std::string head = ShardHeader(tag, rank, n, hashes);
    status = PwriteAll(fd, head.data(), head.size(), 0, tmp);
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = IoError("checkpoint: fsync " + tmp + ": " + std::strerror(errno));
  }
  ::close(fd);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = IoError("checkpoint: rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status.WithContext("checkpoint shard of rank " + std::to_string(rank));
}

}  // namespace

Status Engine::SaveCheckpoint(const std::string& dir, const std::string& tag_in,
                              const std::string& client_state_json) {
  Impl& im = *impl_;
  const int64_t gas = std::max<int64_t>(1, config_.batch.gradient_accumulation_steps);
  if (stats_.micro_steps % gas != 0) {
    return FailedPreconditionError("checkpoint: save between the micro-steps of an accumulation (" +
                                   std::to_string(stats_.micro_steps % gas) + " of " +
                                   std::to_string(gas) +
                                   " done); save after Step() at a gradient-accumulation boundary");
  }
  const std::string tag = tag_in.empty() ? DefaultCheckpointTag(stats_.global_steps) : tag_in;
  STRATA_RETURN_IF_ERROR(ValidateCheckpointTag(tag));
  STRATA_RETURN_IF_ERROR(SettleDeferred());  // the state saved is the last step's
  nlohmann::json client = nlohmann::json::parse(client_state_json, nullptr, false);
  if (client.is_discarded() || !client.is_object()) {
    return InvalidArgumentError("checkpoint: client_state must be a JSON object, got '" +
                                client_state_json.substr(0, 80) + "'");
  }
  if (im.scalar == nullptr) {
    STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, sizeof(float), "step scalars", &im.scalar));
  }
  STRATA_RETURN_IF_ERROR(SettleDeferred());  // no update runs while the state is replaced
  STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
  float* flag = static_cast<float*>(im.scalar);
  const int rank = comm_.rank();

  // 1. Rank 0 makes an empty <tag>.partial.
  // Stage 3 with offload_param nvme: the parameter write-back of the last step has finished.
  Status local = im.store != nullptr ? im.store->Drain() : Status::Ok();
  if (rank == 0 && local.ok()) local = BeginCheckpoint(dir, tag).status();
  STRATA_RETURN_IF_ERROR(Agree(comm_, im.compute, flag, local, "preparing " + tag));

  // 2. Shards (one per partition: stage 0 has one, written by rank 0) and the manifest.
  const std::string partial = (std::filesystem::path(dir) / (tag + ".partial")).string();
  if (rank < im.part_world) {
    const size_t n = layout_.partition_numel();
    if (opt_ != nullptr && opt_->host_addressable()) {
      local = WriteCheckpointShard(
          partial, tag, rank, {{opt_->master(), n}, {opt_->exp_avg(), n}, {opt_->exp_avg_sq(), n}});
    } else {  // NVMe or opaque device memory: one sub-group at a time through host memory
      std::vector<std::pair<size_t, size_t>> chunks;
      for (const SubGroup& g : im.sub_groups) chunks.emplace_back(g.flat_begin, g.flat_end);
      NvmeOptimizerState* nvme = im.nvme_opt.get();
      OptimizerState* opt = opt_.get();
      ChunkFn fetch = [&](size_t begin, size_t end, float* m, float* v, float* sq) -> Status {
        if (nvme != nullptr) return nvme->ReadState(begin, end - begin, m, v, sq);
        using A = OptimizerState::Array;
        STRATA_RETURN_IF_ERROR(opt->Read(A::kMaster, begin, {m, end - begin}));
        STRATA_RETURN_IF_ERROR(opt->Read(A::kExpAvg, begin, {v, end - begin}));
        return opt->Read(A::kExpAvgSq, begin, {sq, end - begin});
      };
      local = WriteShardStreaming(partial, tag, rank, n, chunks, fetch);
    }
    CheckpointCrashPoint("shard_written");
  }
  if (rank == 0 && local.ok()) {
    CheckpointManifest m;
    m.tag = tag;
    m.world_size = comm_.world_size();
    m.partition_world = im.part_world;
    m.zero_stage = static_cast<int>(config_.zero.stage);
    m.dtype = DTypeText(compute_dtype_);
    m.align_numel = AlignNumelOf(layout_);
    for (const nn::Parameter* p : params_) {
      std::vector<int64_t> shape;
      for (int d = 0; d < p->shape().ndim(); ++d) shape.push_back(p->shape()[d]);
      m.params.push_back({p->name(), shape, static_cast<uint64_t>(p->numel())});
    }
    m.loss_scaler = scaler_.state();
    m.micro_steps = stats_.micro_steps;
    m.global_steps = stats_.global_steps;
    m.skipped_steps = stats_.skipped_steps;
    m.last_lr = stats_.last_lr;
    m.last_grad_norm = stats_.last_grad_norm;
    m.optimizer = OptimizerText(config_.optimizer.type);
    const Hyperparams& h = im.hyperparams;
    m.hyperparams = {{"lr", h.lr},
                     {"beta1", h.beta1},
                     {"beta2", h.beta2},
                     {"eps", h.eps},
                     {"weight_decay", h.weight_decay},
                     {"adam_w_mode", h.adam_w_mode},
                     {"bias_correction", h.bias_correction}};
    m.client_state = std::move(client);
    local = WriteFileDurably((std::filesystem::path(partial) / kCheckpointManifestFile).string(),
                             ManifestToJson(m).dump(1));
    CheckpointCrashPoint("manifest_written");
  }
  STRATA_RETURN_IF_ERROR(Agree(comm_, im.compute, flag, local, "writing " + tag));

  // 3. Rank 0 publishes it: rename, then `latest`.
  if (rank == 0) local = CommitCheckpoint(dir, tag);
  return Agree(comm_, im.compute, flag, local, "committing " + tag);
}

Result<std::string> Engine::LoadCheckpoint(const std::string& dir, const std::string& tag) {
  Impl& im = *impl_;
  if (im.scalar == nullptr) {
    STRATA_RETURN_IF_ERROR(im.AllocDevice(device_, sizeof(float), "step scalars", &im.scalar));
  }
  STRATA_RETURN_IF_ERROR(im.compute.Synchronize());
  float* flag = static_cast<float*>(im.scalar);

  // 1. Open, check the model, verify every file this rank will read; nothing changes yet.
  Result<CheckpointReader> reader = CheckpointReader::Open(dir, tag);
  Status local = reader.status();
  if (local.ok()) {
    const CheckpointManifest& m = reader->manifest();
    const std::string where = reader->tag_dir();
    if (m.params.size() != params_.size()) {
      local = InvalidArgumentError(
          "checkpoint " + where + " holds " + std::to_string(m.params.size()) +
          " parameters; this model has " + std::to_string(params_.size()) + " (a different model)");
    }
    for (size_t i = 0; local.ok() && i < params_.size(); ++i) {
      const CheckpointParam& cp = m.params[i];
      if (cp.name != params_[i]->name() || cp.numel != static_cast<uint64_t>(params_[i]->numel())) {
        local = InvalidArgumentError(
            "checkpoint " + where + ": parameter " + std::to_string(i) + " is " + cp.name + " (" +
            std::to_string(cp.numel) + " elements); this model's is " + params_[i]->name() + " (" +
            std::to_string(params_[i]->numel()) + " elements): a different model");
      }
    }
    if (local.ok() && m.optimizer != OptimizerText(config_.optimizer.type)) {
      local = InvalidArgumentError("checkpoint " + where + " holds " + m.optimizer +
                                   " optimizer state; optimizer.type is " +
                                   std::string(OptimizerTypeName(config_.optimizer.type)));
    }
    for (size_t i = 0; local.ok() && i < params_.size(); ++i) {
      const ShardSlice& s = layout_.slices()[i];
      local = reader->VerifyRange(i, s.param_offset, s.valid_numel);
    }
  }
  STRATA_RETURN_IF_ERROR(Agree(comm_, im.compute, flag, local, "opening checkpoint in " + dir));

  // 2. This rank's slices of every parameter, from whichever old shards hold them; padding
  // stays zero.
  const size_t n = layout_.partition_numel();
  if (opt_ != nullptr && opt_->host_addressable()) {
    float* arrays[3] = {opt_->master(), opt_->exp_avg(), opt_->exp_avg_sq()};
    for (float* a : arrays) std::fill(a, a + n, 0.0f);
    for (size_t i = 0; local.ok() && i < params_.size(); ++i) {
      const ShardSlice& s = layout_.slices()[i];
      for (int a = 0; local.ok() && a < 3; ++a) {
        local = reader->Read(i, static_cast<CheckpointArray>(a), s.param_offset,
                             {arrays[a] + s.flat_offset, s.valid_numel});
      }
    }
  } else {
    // NVMe or opaque device memory: one parameter's slices at a time through host memory (the
    // padding is zero in the state and stays so).
    std::vector<float> buf[3];
    for (size_t i = 0; local.ok() && i < params_.size(); ++i) {
      const ShardSlice& s = layout_.slices()[i];
      if (s.valid_numel == 0) continue;
      for (int a = 0; local.ok() && a < 3; ++a) {
        buf[a].resize(s.valid_numel);
        local = reader->Read(i, static_cast<CheckpointArray>(a), s.param_offset, buf[a]);
      }
      if (!local.ok()) break;
      if (im.nvme_opt != nullptr) {
        local = im.nvme_opt->WriteState(s.flat_offset, buf[0], buf[1], buf[2]);
      } else {
        using A = OptimizerState::Array;
        const A which[3] = {A::kMaster, A::kExpAvg, A::kExpAvgSq};
        for (int a = 0; local.ok() && a < 3; ++a) {
          local = opt_->Write(which[a], s.flat_offset, buf[a]);
        }
      }
    }
    if (local.ok() && im.nvme_opt != nullptr) local = im.nvme_opt->Flush();
  }
  STRATA_RETURN_IF_ERROR(Agree(comm_, im.compute, flag, local, "reading checkpoint in " + dir));

  // 3. Counters and the scaler (the LR schedule is a function of the applied steps).
  const CheckpointManifest& m = reader->manifest();
  stats_.micro_steps = m.micro_steps;
  stats_.global_steps = m.global_steps;
  stats_.skipped_steps = m.skipped_steps;
  stats_.last_lr = m.last_lr;
  stats_.last_grad_norm = m.last_grad_norm;
  if (config_.fp16.enabled && m.dtype == "fp16") scaler_.set_state(m.loss_scaler);
  stats_.loss_scale = scaler_.scale();
  STRATA_RETURN_IF_ERROR(ZeroGradients());
  STRATA_RETURN_IF_ERROR(SyncParametersFromMaster());
  if (impl_->store != nullptr) STRATA_RETURN_IF_ERROR(impl_->store->Drain());  // its write-back
  return m.client_state.dump();
}

}  // namespace strata
