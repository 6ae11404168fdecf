// safetensors: reading and writing Hugging Face's tensor file format, single files and sharded
// checkpoints (`model.safetensors.index.json`), without a dependency on nn's Tensor so tools and
// the engine can use it too.
//
// The format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N,
// N bytes of JSON `{"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"k": "v"}}`, then the raw little-endian data, `data_offsets` relative to its
// start. Every check the reference implementation makes is made here (header size, JSON, dtype
// names, shape x dtype size = byte length, offsets in bounds, contiguous, no holes or overlaps,
// no duplicate names), each error naming the file and the tensor. Reading maps the file
// (mmap), so a checkpoint larger than RAM is paged in as its tensors are used.
//
// Strata computes in F32 / F16 / BF16. A file may hold tensors of other dtypes (F64, I64, ...):
// they are validated, RawTensor() returns them, and Tensor() refuses them naming the dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::nn {

// Upper bound on the JSON header, as in the reference implementation (100 MB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// The safetensors name of a Strata dtype: "F32", "F16", "BF16".
std::string_view SafetensorsDTypeName(DType dtype);

// A tensor of any dtype the format knows ("F64", "I64", "BOOL", "F8_E4M3", ...).
struct RawSafetensor {
  std::string_view name;
  std::string_view dtype_name;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // into the mapping: valid while the file object lives
};

// A tensor Strata computes with. `data` may be unaligned: read it with memcpy or the helpers
// below.
struct SafetensorView {
  std::string_view name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
  int64_t numel() const;
};

// One .safetensors file, validated and mapped read-only. Move-only; unmaps on destruction.
// Thread-safe for concurrent reads.
class SafetensorsFile {
 public:
  // Maps and validates `path`. NotFound if it does not exist, DataLoss for a truncated or corrupt
  // file (the message names the file and, where one is at fault, the tensor).
  static Result<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Tensor names, sorted.
  std::vector<std::string> Names() const;
  bool Contains(std::string_view name) const { return entries_.count(name) != 0; }
  size_t size() const { return entries_.size(); }
  // The `__metadata__` map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // NotFound naming the file and the tensor if absent.
  Result<RawSafetensor> RawTensor(std::string_view name) const;
  // As RawTensor, and InvalidArgument naming the dtype unless it is F32, F16 or BF16.
  Result<SafetensorView> Tensor(std::string_view name) const;

 private:
  struct Entry {
    std::string dtype_name;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // within the data section
  };
  SafetensorsFile() = default;
  Status Parse();

  std::string path_;
  const std::byte* map_ = nullptr;
  size_t map_bytes_ = 0;
  const std::byte* data_ = nullptr;  // start of the data section
  std::map<std::string, Entry, std::less<>> entries_;
  std::map<std::string, std::string> metadata_;
};

// A model directory's weights: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` (its `weight_map` from tensor name to shard file), each shard
// opened and validated once. Every weight_map entry must be present in its shard.
class SafetensorsCheckpoint {
 public:
  // The names transformers uses.
  static constexpr std::string_view kSingleFile = "model.safetensors";
  static constexpr std::string_view kIndexFile = "model.safetensors.index.json";

  // Opens `dir`: the index if present, else the single file. NotFound naming both if neither
  // exists.
  static Result<SafetensorsCheckpoint> Open(const std::string& dir);

  // Tensor names across all shards, sorted.
  std::vector<std::string> Names() const;
  bool Contains(std::string_view name) const { return where_.count(name) != 0; }
  size_t num_files() const { return files_.size(); }
  // The file holding `name` (for messages).
  std::string FileOf(std::string_view name) const;

  // NotFound naming the checkpoint directory and the tensor if absent.
  Result<SafetensorView> Tensor(std::string_view name) const;
  Result<RawSafetensor> RawTensor(std::string_view name) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> where_;  // name -> index in files_
};

// Converts `src` to `dst_dtype` into `dst` (dst.size() must be numel x dtype size), rounding to
// nearest even when narrowing. `shape` must equal src.shape: InvalidArgument naming the tensor and
// both shapes otherwise.
Status ConvertSafetensor(const SafetensorView& src, std::span<const int64_t> shape, DType dst_dtype,
                         std::span<std::byte> dst);

// "[2, 3]".
std::string ShapeString(std::span<const int64_t> shape);

// ---- Writing ----

// One tensor to write. `data` holds numel x DTypeBytes(dtype) little-endian bytes.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

// Writes one file atomically (to "<path>.tmp", then renamed). Tensors are laid out widest dtype
// first, then in the order given, so every tensor is aligned to its element size. Metadata goes
// to `__metadata__` (transformers writes {"format": "pt"}). InvalidArgument for an empty or
// duplicate name, "__metadata__" as a name, or a data size that does not match the shape.
Status WriteSafetensors(const std::string& path, std::span<const SafetensorsEntry> tensors,
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// A tensor to write whose bytes are produced on demand (e.g. downloaded from a device), so a
// sharded save holds one shard in host memory at a time. `read` fills exactly numel x dtype size
// bytes.
struct SafetensorsSource {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::function<Status(std::span<std::byte> out)> read;
  uint64_t size_bytes() const;
};

// Writes `tensors` into `dir` as transformers' save_pretrained does: one `model.safetensors` if
// the total fits in `max_shard_bytes`, else shards `model-00001-of-0000N.safetensors` (a new
// shard begins when the next tensor would push the current one past the limit; a tensor larger
// than the limit gets a shard of its own) and `model.safetensors.index.json` with
// {"metadata": {"total_size": bytes}, "weight_map": {name: shard}}. Removes a stale index or
// shards of another layout so the directory is unambiguous. Files are written atomically, the
// index last.
Status WriteSafetensorsCheckpoint(
    const std::string& dir, std::span<const SafetensorsSource> tensors, uint64_t max_shard_bytes,
    const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// The same for tensors already in host memory.
Status WriteSafetensorsCheckpoint(const std::string& dir, std::span<const SafetensorsEntry> tensors,
                                  uint64_t max_shard_bytes,
                                  const std::map<std::string, std::string>& metadata = {
                                      {"format", "pt"}});

}  // namespace strata::nn
