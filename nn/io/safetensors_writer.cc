// Writing safetensors files and sharded checkpoints the way transformers' save_pretrained does.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "nn/io/safetensors.h"

namespace strata::nn {
namespace {

// model.safetensors, model.safetensors.index.json, model-NNNNN-of-NNNNN.safetensors: the files
// a save writes. (Plain string checks: std::regex trips GCC 12's -Wmaybe-uninitialized at -O1.)
bool IsCheckpointFileName(std::string_view name) {
  constexpr std::string_view kSingle = "model.safetensors";
  if (name == kSingle || name == "model.safetensors.index.json") return true;
  // "model-" + 5 digits + "-of-" + 5 digits + ".safetensors"
  constexpr std::string_view kSuffix = ".safetensors";
  if (name.size() != 6 + 5 + 4 + 5 + kSuffix.size()) return false;
  if (!name.starts_with("model-") || name.substr(11, 4) != "-of-" || !name.ends_with(kSuffix)) {
    return false;
  }
  for (size_t k : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19}) {
    if (name[k] < '0' || name[k] > '9') return false;
  }
  return true;
}

Status WriteAll(int fd, const void* p, size_t n, const std::string& path) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "safetensors: write " + path);
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Writes `bytes` then the tensors' data to `path` through "<path>.tmp" + fsync + rename.
Status WriteFileAtomically(const std::string& path, const std::string& head,
                           const std::vector<const SafetensorsEntry*>& order) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "safetensors: create " + tmp);
  Status s = WriteAll(fd, head.data(), head.size(), tmp);
  for (size_t i = 0; s.ok() && i < order.size(); ++i) {
    s = WriteAll(fd, order[i]->data.data(), order[i]->data.size(), tmp);
  }
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoToStatus(errno, "safetensors: fsync " + tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoToStatus(errno, "safetensors: close " + tmp);
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoToStatus(errno, "safetensors: rename " + tmp + " to " + path);
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

Status CheckEntries(const std::string& where, std::span<const SafetensorsEntry> tensors) {
  std::set<std::string_view> names;
  for (const SafetensorsEntry& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return InvalidArgumentError(where + ": '" + t.name + "' is not a valid tensor name");
    }
    if (!names.insert(t.name).second) {
      return InvalidArgumentError(where + ": tensor '" + t.name + "' given twice");
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return InvalidArgumentError(where + ": tensor '" + t.name + "' has a negative dimension " +
                                    ShapeString(t.shape));
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * DTypeBytes(t.dtype) != t.data.size()) {
      return InvalidArgumentError(
          where + ": tensor '" + t.name + "' " + std::string(SafetensorsDTypeName(t.dtype)) + " " +
          ShapeString(t.shape) + " needs " + std::to_string(numel * DTypeBytes(t.dtype)) +
          " bytes, got " + std::to_string(t.data.size()));
    }
  }
  return Status::Ok();
}

// model-00001-of-00003.safetensors
std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

Status WriteSafetensors(const std::string& path, std::span<const SafetensorsEntry> tensors,
                        const std::map<std::string, std::string>& metadata) {
  STRATA_RETURN_IF_ERROR(CheckEntries("safetensors " + path, tensors));
  // Widest dtype first (stable), so each tensor starts aligned to its element size.
  std::vector<const SafetensorsEntry*> order;
  for (const SafetensorsEntry& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return DTypeBytes(a->dtype) > DTypeBytes(b->dtype);
  });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry* t : order) {
    header[t->name] = {{"dtype", SafetensorsDTypeName(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->data.size()}}};
    offset += t->data.size();
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
  head += json;
  return WriteFileAtomically(path, head, order);
}

uint64_t SafetensorsSource::size_bytes() const {
  uint64_t n = DTypeBytes(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  return n;
}

Status WriteSafetensorsCheckpoint(const std::string& dir,
                                  std::span<const SafetensorsSource> tensors,
                                  uint64_t max_shard_bytes,
                                  const std::map<std::string, std::string>& metadata) {
  namespace fs = std::filesystem;
  const std::string where = "checkpoint " + dir;
  {
    // Validate names and shapes up front (no data yet): nothing is written for a bad list.
    std::vector<SafetensorsEntry> shapes_only;
    for (const SafetensorsSource& t : tensors) {
      for (int64_t d : t.shape) {
        if (d < 0) {
          return InvalidArgumentError(where + ": tensor '" + t.name +
                                      "' has a negative dimension " + ShapeString(t.shape));
        }
      }
      shapes_only.push_back({t.name, DType::kFloat32, {0}, {}});
    }
    STRATA_RETURN_IF_ERROR(CheckEntries(where, shapes_only));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(where + ": create directory: " + ec.message());

  // Split as huggingface_hub's split_state_dict_into_shards does.
  std::vector<std::vector<const SafetensorsSource*>> shards(1);
  uint64_t current = 0, total = 0;
  for (const SafetensorsSource& t : tensors) {
    if (!shards.back().empty() && current + t.size_bytes() > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&t);
    current += t.size_bytes();
    total += t.size_bytes();
  }

  std::set<std::string> written;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shards.size() == 1 ? std::string(SafetensorsCheckpoint::kSingleFile)
                                                : ShardName(i, shards.size());
    // One shard's bytes in host memory at a time.
    std::vector<std::vector<std::byte>> buffers;
    std::vector<SafetensorsEntry> entries;
    buffers.reserve(shards[i].size());
    for (const SafetensorsSource* t : shards[i]) {
      buffers.emplace_back(t->size_bytes());
      Status s = t->read(buffers.back());
      if (!s.ok()) return s.WithContext(where + ": tensor '" + t->name + "'");
      entries.push_back({t->name, t->dtype, t->shape, buffers.back()});
      weight_map[t->name] = file;
    }
    STRATA_RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / file).string(), entries, metadata));
    written.insert(file);
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}},
                                  {"weight_map", weight_map}};
    const std::string index_file(SafetensorsCheckpoint::kIndexFile);
    const std::string path = (fs::path(dir) / index_file).string();
    const std::string tmp = path + ".tmp";
    {
      FILE* f = std::fopen(tmp.c_str(), "w");
      if (f == nullptr) return ErrnoToStatus(errno, "safetensors: create " + tmp);
      const std::string text = index.dump(2) + "\n";
      const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
      const int err = errno;
      if (std::fclose(f) != 0 || !ok) {
        ::unlink(tmp.c_str());
        return ErrnoToStatus(ok ? errno : err, "safetensors: write " + tmp);
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return ErrnoToStatus(errno, "safetensors: rename " + tmp + " to " + path);
    }
    written.insert(index_file);
  }
  // Remove what an earlier save of another layout left, so the directory is unambiguous.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (IsCheckpointFileName(name) && !written.count(name)) fs::remove(e.path(), ec);
  }
  return Status::Ok();
}

Status WriteSafetensorsCheckpoint(const std::string& dir, std::span<const SafetensorsEntry> tensors,
                                  uint64_t max_shard_bytes,
                                  const std::map<std::string, std::string>& metadata) {
  STRATA_RETURN_IF_ERROR(CheckEntries("checkpoint " + dir, tensors));
  std::vector<SafetensorsSource> sources;
  sources.reserve(tensors.size());
  for (const SafetensorsEntry& t : tensors) {
    sources.push_back({t.name, t.dtype, t.shape, [&t](std::span<std::byte> out) {
                         std::copy(t.data.begin(), t.data.end(), out.begin());
                         return Status::Ok();
                       }});
  }
  return WriteSafetensorsCheckpoint(dir, sources, max_shard_bytes, metadata);
}

}  // namespace strata::nn
