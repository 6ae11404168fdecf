// CheckpointReader: parameters' slices out of the shard files of any world size (checkpoint.h).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>

#include "engine/base/partition.h"
#include "engine/checkpoint/checkpoint.h"
#include "nn/io/safetensors.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace strata {

namespace fs = std::filesystem;

struct CheckpointReader::Impl {
  std::vector<PartitionLayout> layouts;  // one per old rank
  std::vector<std::optional<nn::SafetensorsFile>> files;
  std::vector<std::span<const std::byte>> arrays[3];  // per old rank, when open

  Status OpenShard(const std::string& tag_dir, const std::string& tag, size_t rank) {
    if (files[rank].has_value()) return Status::Ok();
    const std::string path =
        (fs::path(tag_dir) / CheckpointShardFileName(static_cast<int>(rank))).string();
    Result<nn::SafetensorsFile> f = nn::SafetensorsFile::Open(path);
    if (!f.ok()) {
      if (f.status().code() == StatusCode::kNotFound) {
        return DataLossError("checkpoint: shard file " + path + " is missing");
      }
      return f.status().WithContext("checkpoint shard");
    }
    const auto& meta = f->metadata();
    const auto rank_it = meta.find("rank");
    const auto tag_it = meta.find("tag");
    if (rank_it == meta.end() || rank_it->second != std::to_string(rank) || tag_it == meta.end() ||
        tag_it->second != tag) {
      return DataLossError("checkpoint: shard file " + path + " is not rank " +
                           std::to_string(rank) + "'s shard of tag '" + tag + "'");
    }
    const size_t want = layouts[rank].partition_numel();
    for (int a = 0; a < 3; ++a) {
      const std::string name(CheckpointArrayName(static_cast<CheckpointArray>(a)));
      Result<nn::RawSafetensor> t = f->RawTensor(name);
      if (!t.ok())
        return DataLossError("checkpoint: shard file " + path + ": " + t.status().message());
      if (t->dtype_name != "F32" || t->shape.size() != 1 ||
          static_cast<size_t>(t->shape[0]) != want) {
        return DataLossError("checkpoint: shard file " + path + ": tensor " + name + " is " +
                             std::string(t->dtype_name) + " " + nn::ShapeString(t->shape) +
                             ", expected F32 [" + std::to_string(want) +
                             "] (the partition of the manifest's layout)");
      }
      const auto sum_it = meta.find("xxh3." + name);
      char hex[20];
      std::snprintf(hex, sizeof(hex), "%016llx",
                    static_cast<unsigned long long>(XXH3_64bits(t->data.data(), t->data.size())));
      if (sum_it == meta.end() || sum_it->second != hex) {
        return DataLossError("checkpoint: shard file " + path + ": checksum of " + name +
                             " does not match (stored " +
                             (sum_it == meta.end() ? std::string("none") : sum_it->second) +
                             ", computed " + hex + "): the file is corrupt");
      }
      arrays[a][rank] = t->data;
    }
    files[rank].emplace(std::move(f).value());
    return Status::Ok();
  }
};

CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

Result<CheckpointReader> CheckpointReader::Open(const std::string& dir, const std::string& tag) {
  CheckpointReader r;
  STRATA_ASSIGN_OR_RETURN(r.tag_dir_, ResolveCheckpointDir(dir, tag));
  STRATA_ASSIGN_OR_RETURN(r.manifest_, ReadCheckpointManifest(r.tag_dir_));
  r.impl_ = std::make_unique<Impl>();
  std::vector<size_t> numels;
  for (const CheckpointParam& p : r.manifest_.params) numels.push_back(p.numel);
  const int pw = r.manifest_.partition_world;
  for (int rank = 0; rank < pw; ++rank) {
    STRATA_ASSIGN_OR_RETURN(PartitionLayout l,
                            PartitionLayout::Create(numels, pw, rank, r.manifest_.align_numel));
    r.impl_->layouts.push_back(std::move(l));
  }
  r.impl_->files.resize(static_cast<size_t>(pw));
  for (auto& a : r.impl_->arrays) a.resize(static_cast<size_t>(pw));
  return r;
}

Status CheckpointReader::VerifyAll() {
  for (size_t rank = 0; rank < impl_->layouts.size(); ++rank) {
    STRATA_RETURN_IF_ERROR(impl_->OpenShard(tag_dir_, manifest_.tag, rank));
  }
  return Status::Ok();
}

Status CheckpointReader::VerifyRange(size_t param, size_t begin, size_t count) {
  if (param >= manifest_.params.size()) {
    return InvalidArgumentError("checkpoint: no parameter " + std::to_string(param) + " in " +
                                tag_dir_);
  }
  for (size_t rank = 0; rank < impl_->layouts.size(); ++rank) {
    const ShardSlice& s = impl_->layouts[rank].slices()[param];
    const size_t lo = std::max(begin, s.param_offset);
    const size_t hi = std::min(begin + count, s.param_offset + s.valid_numel);
    if (lo < hi) STRATA_RETURN_IF_ERROR(impl_->OpenShard(tag_dir_, manifest_.tag, rank));
  }
  return Status::Ok();
}

Status CheckpointReader::Read(size_t param, CheckpointArray array, size_t begin,
                              std::span<float> out) {
  if (param >= manifest_.params.size()) {
    return InvalidArgumentError("checkpoint: no parameter " + std::to_string(param) + " in " +
                                tag_dir_);
  }
  const size_t numel = manifest_.params[param].numel;
  if (begin > numel || out.size() > numel - begin) {
    return InvalidArgumentError("checkpoint: elements [" + std::to_string(begin) + ", " +
                                std::to_string(begin + out.size()) + ") outside " +
                                manifest_.params[param].name + " (" + std::to_string(numel) + ")");
  }
  const size_t end = begin + out.size();
  const int a = static_cast<int>(array);
  for (size_t rank = 0; rank < impl_->layouts.size(); ++rank) {
    const ShardSlice& s = impl_->layouts[rank].slices()[param];
    const size_t lo = std::max(begin, s.param_offset);
    const size_t hi = std::min(end, s.param_offset + s.valid_numel);
    if (lo >= hi) continue;
    STRATA_RETURN_IF_ERROR(impl_->OpenShard(tag_dir_, manifest_.tag, rank));
    const std::byte* src =
        impl_->arrays[a][rank].data() + (s.flat_offset + (lo - s.param_offset)) * sizeof(float);
    std::memcpy(out.data() + (lo - begin), src, (hi - lo) * sizeof(float));
  }
  return Status::Ok();
}

}  // namespace strata
