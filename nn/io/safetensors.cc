// Reading safetensors files and sharded checkpoints. See nn/io/safetensors.h for the format.
#include "nn/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/half.h"

namespace strata::nn {
namespace {

// Element size of every dtype the format defines; 0 for names it does not.
uint64_t FormatDTypeBytes(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

std::optional<DType> StrataDType(std::string_view d) {
  if (d == "F32") return DType::kFloat32;
  if (d == "F16") return DType::kFloat16;
  if (d == "BF16") return DType::kBFloat16;
  return std::nullopt;
}

// a * b, false on overflow.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

float LoadAsFloat(const std::byte* p, DType t) {
  if (t == DType::kFloat32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return t == DType::kFloat16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
}

void StoreFromFloat(float f, DType t, std::byte* p) {
  if (t == DType::kFloat32) {
    std::memcpy(p, &f, 4);
    return;
  }
  const uint16_t h = t == DType::kFloat16 ? FloatToFp16(f) : FloatToBf16(f);
  std::memcpy(p, &h, 2);
}

}  // namespace

std::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
  }
  return "?";
}

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t SafetensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept { *this = std::move(o); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) munmap(const_cast<std::byte*>(map_), map_bytes_);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    entries_ = std::move(o.entries_);
    metadata_ = std::move(o.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(const_cast<std::byte*>(map_), map_bytes_);
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "safetensors: open " + path);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "safetensors: stat " + path);
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return DataLossError("safetensors " + path + ": truncated: " + std::to_string(file_bytes) +
                         " bytes, shorter than the 8-byte header length");
  }
  void* m = mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (m == MAP_FAILED) return ErrnoToStatus(err, "safetensors: mmap " + path);
  f.map_ = static_cast<const std::byte*>(m);
  f.map_bytes_ = file_bytes;
  STRATA_RETURN_IF_ERROR(f.Parse());
  return f;
}

Status SafetensorsFile::Parse() {
  const std::string where = "safetensors " + path_;
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes = (header_bytes << 8) | std::to_integer<uint64_t>(map_[i]);
  }
  if (header_bytes > kSafetensorsMaxHeaderBytes) {
    return DataLossError(where + ": header length " + std::to_string(header_bytes) +
                         " exceeds the format's limit of " +
                         std::to_string(kSafetensorsMaxHeaderBytes) + " bytes (corrupt file?)");
  }
  if (8 + header_bytes > map_bytes_) {
    return DataLossError(where + ": truncated: the header says " + std::to_string(header_bytes) +
                         " bytes of JSON but the file has " + std::to_string(map_bytes_ - 8) +
                         " after the length");
  }
  const auto* text = reinterpret_cast<const char*>(map_ + 8);
  if (header_bytes < 2 || text[0] != '{') {
    return DataLossError(where + ": the header does not start with '{' (not a safetensors file?)");
  }
  // Top-level keys are collected while parsing: nlohmann keeps only the last of duplicate keys.
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                             nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  const nlohmann::json header =
      nlohmann::json::parse(text, text + header_bytes, cb, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return DataLossError(where + ": the " + std::to_string(header_bytes) +
                         "-byte header is not a JSON object (corrupt or truncated header)");
  }
  if (!duplicate.empty()) {
    return DataLossError(where + ": tensor '" + duplicate + "' appears twice in the header");
  }
  data_ = map_ + 8 + header_bytes;
  const uint64_t data_bytes = map_bytes_ - 8 - header_bytes;

  std::vector<std::pair<uint64_t, const std::string*>> order;  // begin offset -> name
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return DataLossError(where + ": __metadata__ is not an object");
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string()) {
          return DataLossError(where + ": __metadata__ value '" + k +
                               "' is not a string (the format allows only strings)");
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string what = where + ": tensor '" + name + "'";
    if (!info.is_object()) return DataLossError(what + ": header entry is not an object");
    const auto dt = info.find("dtype");
    const auto sh = info.find("shape");
    const auto off = info.find("data_offsets");
    if (dt == info.end() || sh == info.end() || off == info.end()) {
      return DataLossError(what + ": header entry lacks dtype, shape or data_offsets");
    }
    if (!dt->is_string() || FormatDTypeBytes(dt->get<std::string>()) == 0) {
      return DataLossError(what + ": unknown dtype " + dt->dump() +
                           " (the format defines F64, F32, F16, BF16, I64, I32, I16, I8, U64, "
                           "U32, U16, U8, BOOL, F8_E4M3, F8_E5M2)");
    }
    Entry e;
    e.dtype_name = dt->get<std::string>();
    if (!sh->is_array()) return DataLossError(what + ": shape is not an array");
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return DataLossError(what + ": shape " + sh->dump() + " has a non-integer or negative");
      }
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX) || !MulOk(numel, v, &numel)) {
        return DataLossError(what + ": shape " + sh->dump() + " overflows");
      }
      e.shape.push_back(static_cast<int64_t>(v));
    }
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return DataLossError(what + ": data_offsets " + off->dump() +
                           " is not [begin, end] of non-negative integers");
    }
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    uint64_t expect = 0;
    if (!MulOk(numel, FormatDTypeBytes(e.dtype_name), &expect)) {
      return DataLossError(what + ": shape " + sh->dump() + " overflows");
    }
    if (e.end < e.begin || e.end - e.begin != expect) {
      return DataLossError(what + ": data_offsets " + off->dump() + " span " +
                           std::to_string(e.end - std::min(e.begin, e.end)) + " bytes but " +
                           e.dtype_name + " " + sh->dump() + " needs " + std::to_string(expect));
    }
    if (e.end > data_bytes) {
      return DataLossError(what + ": data_offsets " + off->dump() + " end past the data (" +
                           std::to_string(data_bytes) + " bytes; file truncated?)");
    }
    auto [it, inserted] = entries_.emplace(name, std::move(e));
    order.emplace_back(it->second.begin, &it->first);
  }
  // The data section is covered exactly: no holes, no overlaps, nothing after the last tensor.
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    const Entry& ea = entries_.find(*a.second)->second;
    const Entry& eb = entries_.find(*b.second)->second;
    return std::tie(ea.begin, ea.end) < std::tie(eb.begin, eb.end);
  });
  uint64_t pos = 0;
  for (const auto& [begin, name] : order) {
    const Entry& e = entries_.find(*name)->second;
    if (e.begin != pos) {
      return DataLossError(where + ": tensor '" + *name + "' begins at data offset " +
                           std::to_string(e.begin) + " but the previous tensor ends at " +
                           std::to_string(pos) + (e.begin > pos ? " (a hole)" : " (overlap)"));
    }
    pos = e.end;
  }
  if (pos != data_bytes) {
    return DataLossError(where + ": the tensors cover " + std::to_string(pos) +
                         " bytes of data but the file holds " + std::to_string(data_bytes) +
                         " after the header (trailing bytes)");
  }
  return Status::Ok();
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, e] : entries_) names.push_back(name);
  return names;
}

Result<RawSafetensor> SafetensorsFile::RawTensor(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    return NotFoundError("safetensors " + path_ + ": no tensor '" + std::string(name) + "'");
  }
  const Entry& e = it->second;
  return RawSafetensor{it->first, e.dtype_name, e.shape,
                       std::span<const std::byte>(data_ + e.begin, e.end - e.begin)};
}

Result<SafetensorView> SafetensorsFile::Tensor(std::string_view name) const {
  STRATA_ASSIGN_OR_RETURN(RawSafetensor raw, RawTensor(name));
  const auto dtype = StrataDType(raw.dtype_name);
  if (!dtype) {
    return InvalidArgumentError("safetensors " + path_ + ": tensor '" + std::string(name) +
                                "' has dtype " + std::string(raw.dtype_name) +
                                "; Strata reads F32, F16 and BF16");
  }
  return SafetensorView{raw.name, *dtype, std::move(raw.shape), raw.data};
}

// ---- SafetensorsCheckpoint ----

Result<SafetensorsCheckpoint> SafetensorsCheckpoint::Open(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsCheckpoint c;
  c.dir_ = dir;
  const fs::path index_path = fs::path(dir) / kIndexFile;
  const fs::path single_path = fs::path(dir) / kSingleFile;
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec)) {
      return NotFoundError("checkpoint " + dir + ": neither " + std::string(kSingleFile) + " nor " +
                           std::string(kIndexFile) + " exists");
    }
    STRATA_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(single_path.string()));
    for (const std::string& n : f.Names()) c.where_.emplace(n, 0);
    c.files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    return c;
  }
  const std::string where = "safetensors index " + index_path.string();
  std::ifstream in(index_path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return IoError(where + ": cannot read");
  const nlohmann::json index = nlohmann::json::parse(text.str(), nullptr, false);
  if (index.is_discarded() || !index.is_object()) {
    return DataLossError(where + ": not a JSON object");
  }
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return DataLossError(where + ": no \"weight_map\" object");
  }
  std::map<std::string, size_t> file_index;  // shard name -> index in files_
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) {
      return DataLossError(where + ": weight_map entry '" + name + "' is not a file name");
    }
    const std::string file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "..") {
      return DataLossError(where + ": weight_map entry '" + name + "' names '" + file +
                           "', not a file in the checkpoint directory");
    }
    auto it = file_index.find(file);
    if (it == file_index.end()) {
      auto opened = SafetensorsFile::Open((fs::path(dir) / file).string());
      if (!opened.ok()) {
        return opened.status().WithContext(where + ": shard of '" + name + "'");
      }
      c.files_.push_back(std::make_unique<SafetensorsFile>(std::move(opened).value()));
      it = file_index.emplace(file, c.files_.size() - 1).first;
    }
    if (!c.files_[it->second]->Contains(name)) {
      return DataLossError(where + ": tensor '" + name + "' is mapped to " + file +
                           " but that file does not hold it");
    }
    c.where_.emplace(name, it->second);
  }
  return c;
}

std::vector<std::string> SafetensorsCheckpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, i] : where_) names.push_back(name);
  return names;
}

std::string SafetensorsCheckpoint::FileOf(std::string_view name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? dir_ : files_[it->second]->path();
}

Result<RawSafetensor> SafetensorsCheckpoint::RawTensor(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) {
    return NotFoundError("checkpoint " + dir_ + ": no tensor '" + std::string(name) + "'");
  }
  return files_[it->second]->RawTensor(name);
}

Result<SafetensorView> SafetensorsCheckpoint::Tensor(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) {
    return NotFoundError("checkpoint " + dir_ + ": no tensor '" + std::string(name) + "'");
  }
  return files_[it->second]->Tensor(name);
}

// ---- Conversion ----

Status ConvertSafetensor(const SafetensorView& src, std::span<const int64_t> shape, DType dst_dtype,
                         std::span<std::byte> dst) {
  if (!std::equal(shape.begin(), shape.end(), src.shape.begin(), src.shape.end())) {
    return InvalidArgumentError("tensor '" + std::string(src.name) + "' has shape " +
                                ShapeString(src.shape) + " but " + ShapeString(shape) +
                                " is expected");
  }
  const auto n = static_cast<size_t>(src.numel());
  if (dst.size() != n * DTypeBytes(dst_dtype)) {
    return InvalidArgumentError("tensor '" + std::string(src.name) + "': destination holds " +
                                std::to_string(dst.size()) + " bytes, " +
                                std::to_string(n * DTypeBytes(dst_dtype)) + " needed");
  }
  if (src.dtype == dst_dtype) {
    if (n != 0) std::memcpy(dst.data(), src.data.data(), dst.size());
    return Status::Ok();
  }
  const size_t in = DTypeBytes(src.dtype), out = DTypeBytes(dst_dtype);
  for (size_t i = 0; i < n; ++i) {
    StoreFromFloat(LoadAsFloat(src.data.data() + i * in, src.dtype), dst_dtype,
                   dst.data() + i * out);
  }
  return Status::Ok();
}

}  // namespace strata::nn
