// safetensors: round trips, sharded checkpoints, conversions, and every corruption case the
// reader must refuse (each error naming the file and, where one is at fault, the tensor).
#include "nn/io/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::nn {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v));
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Writes a file from a header text and data bytes, with `header_len` as the length field
// (default: the text's size), the way a corrupt or hand-made file would look.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data,
              uint64_t header_len = UINT64_MAX) {
  if (header_len == UINT64_MAX) header_len = header.size();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_len >> (8 * i)) & 0xFF));
  out << header << data;
}

TEST(SafetensorsTest, RoundTripsEveryDTypeShapeAndMetadata) {
  ScratchDir dir;
  const auto f32 = strata::testing::RandomBytes(4 * 6, 1);
  const auto f16 = strata::testing::RandomBytes(2 * 5, 2);
  const auto bf16 = strata::testing::RandomBytes(2 * 3, 3);
  const auto scalar = strata::testing::RandomBytes(4, 4);
  const std::vector<uint8_t> empty;
  const std::vector<SafetensorsEntry> entries = {
      {"b.half", DType::kFloat16, {5}, Bytes(f16)},
      {"a.weight", DType::kFloat32, {2, 3}, Bytes(f32)},
      {"c.bf", DType::kBFloat16, {1, 3, 1}, Bytes(bf16)},
      {"scalar", DType::kFloat32, {}, Bytes(scalar)},
      {"empty", DType::kFloat32, {0, 4}, Bytes(empty)},
  };
  const std::string path = dir.File("m.safetensors");
  ASSERT_THAT(WriteSafetensors(path, entries, {{"format", "pt"}, {"who", "test"}}), IsOk());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto file = SafetensorsFile::Open(path);
  ASSERT_THAT(file, IsOk());
  EXPECT_THAT(file->Names(), ElementsAre("a.weight", "b.half", "c.bf", "empty", "scalar"));
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("who"), "test");
  for (const SafetensorsEntry& e : entries) {
    auto t = file->Tensor(e.name);
    ASSERT_THAT(t, IsOk()) << e.name;
    EXPECT_EQ(t->dtype, e.dtype) << e.name;
    EXPECT_EQ(t->shape, e.shape) << e.name;
    ASSERT_EQ(t->data.size(), e.data.size()) << e.name;
    if (!e.data.empty()) {  // memcmp of empty spans may see null pointers
      EXPECT_EQ(std::memcmp(t->data.data(), e.data.data(), e.data.size()), 0) << e.name;
    }
    // Widest dtype first: every tensor is aligned to its element size in the file.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data.data()) % DTypeBytes(e.dtype), 0u) << e.name;
  }
  EXPECT_EQ(file->Tensor("scalar")->numel(), 1);
  EXPECT_EQ(file->Tensor("empty")->numel(), 0);

  // The header is padded so the data section starts 8-byte aligned, and is plain JSON.
  const auto raw = ReadAll(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | raw[static_cast<size_t>(i)];
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header =
      nlohmann::json::parse(raw.begin() + 8, raw.begin() + 8 + static_cast<long>(n));
  EXPECT_EQ(header["a.weight"]["dtype"], "F32");
  EXPECT_EQ(header["b.half"]["dtype"], "F16");
  EXPECT_EQ(header["c.bf"]["dtype"], "BF16");
}

TEST(SafetensorsTest, ReadsAHandWrittenFileAsTheFormatDefinesIt) {
  // Two tensors as the reference implementation lays them out: header padded with spaces.
  ScratchDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("h":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}    )";
  std::string data(12, '\0');
  const float w[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), w, 8);
  const uint16_t h[2] = {0x3F80, 0xC040};  // bf16 1.0, -3.0
  std::memcpy(data.data() + 8, h, 4);
  const std::string path = dir.File("hand.safetensors");
  WriteRaw(path, header, data);
  auto file = SafetensorsFile::Open(path);
  ASSERT_THAT(file, IsOk());
  auto t = file->Tensor("h");
  ASSERT_THAT(t, IsOk());
  std::vector<float> out(2);
  ASSERT_THAT(
      ConvertSafetensor(*t, t->shape, DType::kFloat32, std::as_writable_bytes(std::span(out))),
      IsOk());
  EXPECT_THAT(out, ElementsAre(1.0f, -3.0f));
  auto tw = file->Tensor("w");
  ASSERT_THAT(tw, IsOk());
  ASSERT_THAT(
      ConvertSafetensor(*tw, tw->shape, DType::kFloat32, std::as_writable_bytes(std::span(out))),
      IsOk());
  EXPECT_THAT(out, ElementsAre(1.5f, -2.0f));
}

TEST(SafetensorsTest, ConvertsBetweenDTypesRoundingToNearestEven) {
  ScratchDir dir;
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties to even gives 1.
  // 1 + 3 * 2^-9 rounds up to 1 + 2^-7; 65520 overflows fp16 to +inf.
  const std::vector<float> src = {1.0f + 1.0f / 256, 1.0f + 3.0f / 512, 65520.0f, -0.0f};
  const std::vector<SafetensorsEntry> e = {
      {"x", DType::kFloat32, {4}, std::as_bytes(std::span(src))}};
  ASSERT_THAT(WriteSafetensors(dir.File("c.safetensors"), e), IsOk());
  auto file = SafetensorsFile::Open(dir.File("c.safetensors"));
  ASSERT_THAT(file, IsOk());
  auto t = file->Tensor("x");
  ASSERT_THAT(t, IsOk());
  std::vector<uint16_t> bf(4), hf(4);
  const std::vector<int64_t> shape = {4};
  ASSERT_THAT(ConvertSafetensor(*t, shape, DType::kBFloat16, std::as_writable_bytes(std::span(bf))),
              IsOk());
  EXPECT_THAT(bf, ElementsAre(0x3F80, 0x3F81, 0x4780, 0x8000));
  ASSERT_THAT(ConvertSafetensor(*t, shape, DType::kFloat16, std::as_writable_bytes(std::span(hf))),
              IsOk());
  EXPECT_THAT(hf, ElementsAre(0x3C04, 0x3C06, 0x7C00, 0x8000));

  const std::vector<int64_t> wrong = {2, 2};
  EXPECT_THAT(ConvertSafetensor(*t, wrong, DType::kFloat32, std::as_writable_bytes(std::span(hf))),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'x'"), HasSubstr("[4]"), HasSubstr("[2, 2]"))));
}

TEST(SafetensorsTest, KeepsOtherDTypesReadableRawButRefusesThemAsTensors) {
  ScratchDir dir;
  const std::string path = dir.File("ids.safetensors");
  WriteRaw(path, R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
           std::string(16, '\1'));
  auto file = SafetensorsFile::Open(path);
  ASSERT_THAT(file, IsOk());
  auto raw = file->RawTensor("ids");
  ASSERT_THAT(raw, IsOk());
  EXPECT_EQ(raw->dtype_name, "I64");
  EXPECT_EQ(raw->data.size(), 16u);
  EXPECT_THAT(file->Tensor("ids"),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("'ids'"), HasSubstr("I64"),
                             HasSubstr("F32, F16 and BF16"))));
  EXPECT_THAT(file->Tensor("nope"),
              StatusIs(StatusCode::kNotFound, AllOf(HasSubstr(path), HasSubstr("'nope'"))));
}

TEST(SafetensorsTest, ReportsAMissingFileAsNotFound) {
  ScratchDir dir;
  EXPECT_THAT(SafetensorsFile::Open(dir.File("absent.safetensors")),
              StatusIs(StatusCode::kNotFound, HasSubstr("absent.safetensors")));
}

// One corrupt file: the header text, data, optional length field, and the words expected.
struct Corruption {
  const char* case_name;
  std::string header;
  std::string data;
  uint64_t header_len;
  std::vector<std::string> words;
};

class SafetensorsCorruptionTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(SafetensorsCorruptionTest, IsRefusedAsDataLossNamingFileAndTensor) {
  const Corruption& c = GetParam();
  ScratchDir dir;
  const std::string path = dir.File(std::string(c.case_name) + ".safetensors");
  WriteRaw(path, c.header, c.data, c.header_len);
  auto file = SafetensorsFile::Open(path);
  EXPECT_THAT(file, StatusIs(StatusCode::kDataLoss, HasSubstr(path)));
  for (const std::string& w : c.words) {
    EXPECT_THAT(file, StatusIs(StatusCode::kDataLoss, HasSubstr(w)));
  }
}

const std::string kW4 = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
const std::string kData4(4, '\0');

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsCorruptionTest,
    ::testing::Values(
        Corruption{"header_length_too_large",
                   "{" + kW4 + "}",
                   kData4,
                   200'000'000,
                   {"exceeds the format's limit"}},
        Corruption{"truncated_header", "{" + kW4 + "}", "", 4096, {"truncated"}},
        Corruption{"not_json", "{\"w\": [1, 2", kData4, UINT64_MAX, {"not a JSON object"}},
        Corruption{"not_an_object", "[1, 2, 3]   ", "", UINT64_MAX, {"does not start with '{'"}},
        Corruption{"duplicate_name",
                   "{" + kW4 + "," + kW4 + "}",
                   kData4,
                   UINT64_MAX,
                   {"'w' appears twice"}},
        Corruption{"missing_dtype",
                   R"({"w":{"shape":[1],"data_offsets":[0,4]}})",
                   kData4,
                   UINT64_MAX,
                   {"'w'", "lacks dtype"}},
        Corruption{"unknown_dtype",
                   R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,4]}})",
                   kData4,
                   UINT64_MAX,
                   {"'w'", "unknown dtype \"F128\""}},
        Corruption{"negative_dim",
                   R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                   kData4,
                   UINT64_MAX,
                   {"'w'", "negative"}},
        Corruption{"bad_offsets",
                   R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
                   kData4,
                   UINT64_MAX,
                   {"'w'", "data_offsets"}},
        Corruption{"size_mismatch",
                   R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
                   kData4,
                   UINT64_MAX,
                   {"'w'", "needs 8"}},
        Corruption{"truncated_data",
                   R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                   kData4,
                   UINT64_MAX,
                   {"'w'", "truncated"}},
        Corruption{"hole",
                   R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, '\0'),
                   UINT64_MAX,
                   {"'w'", "hole"}},
        Corruption{"overlap",
                   R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, '\0'),
                   UINT64_MAX,
                   {"'b'", "overlap"}},
        Corruption{"trailing_bytes",
                   "{" + kW4 + "}",
                   std::string(12, '\0'),
                   UINT64_MAX,
                   {"trailing bytes"}},
        Corruption{"metadata_not_string",
                   R"({"__metadata__":{"step":3},)" + kW4 + "}",
                   kData4,
                   UINT64_MAX,
                   {"'step'", "not a string"}}),
    [](const auto& info) { return std::string(info.param.case_name); });

TEST(SafetensorsTest, RefusesAFileShorterThanItsLengthField) {
  ScratchDir dir;
  const std::string path = dir.File("short.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_THAT(SafetensorsFile::Open(path),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(path), HasSubstr("truncated"))));
}

TEST(SafetensorsTest, RefusesBadEntriesWhenWriting) {
  ScratchDir dir;
  const std::vector<uint8_t> four(4);
  const std::string path = dir.File("w.safetensors");
  std::vector<SafetensorsEntry> dup = {{"x", DType::kFloat32, {1}, Bytes(four)},
                                       {"x", DType::kFloat32, {1}, Bytes(four)}};
  EXPECT_THAT(WriteSafetensors(path, dup),
              StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("'x'"), HasSubstr("twice"))));
  std::vector<SafetensorsEntry> size = {{"y", DType::kFloat16, {3}, Bytes(four)}};
  EXPECT_THAT(WriteSafetensors(path, size),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'y'"), HasSubstr("needs 6 bytes, got 4"))));
  std::vector<SafetensorsEntry> reserved = {{"__metadata__", DType::kFloat32, {1}, Bytes(four)}};
  EXPECT_THAT(WriteSafetensors(path, reserved),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("__metadata__")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// ---- Sharded checkpoints ----

struct Model {
  std::vector<std::vector<uint8_t>> data;
  std::vector<SafetensorsEntry> entries;
};

// Four F32 tensors of 400, 400, 1200 and 40 bytes.
Model MakeModel() {
  Model m;
  const std::vector<std::pair<std::string, int64_t>> spec = {{"model.embed_tokens.weight", 100},
                                                             {"model.layers.0.w", 100},
                                                             {"lm_head.weight", 300},
                                                             {"model.norm.weight", 10}};
  m.data.reserve(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) {
    m.data.push_back(strata::testing::RandomBytes(static_cast<size_t>(spec[i].second) * 4, 10 + i));
  }
  for (size_t i = 0; i < spec.size(); ++i) {
    m.entries.push_back({spec[i].first, DType::kFloat32, {spec[i].second}, Bytes(m.data[i])});
  }
  return m;
}

void ExpectHolds(const SafetensorsCheckpoint& c, const Model& m) {
  EXPECT_EQ(c.Names().size(), m.entries.size());
  for (const SafetensorsEntry& e : m.entries) {
    auto t = c.Tensor(e.name);
    ASSERT_THAT(t, IsOk());
    ASSERT_EQ(t->data.size(), e.data.size());
    if (!e.data.empty()) {  // memcmp of empty spans may see null pointers
      EXPECT_EQ(std::memcmp(t->data.data(), e.data.data(), e.data.size()), 0) << e.name;
    }
  }
}

TEST(SafetensorsCheckpointTest, WritesOneFileWhenEverythingFits) {
  ScratchDir dir;
  const Model m = MakeModel();
  ASSERT_THAT(WriteSafetensorsCheckpoint(dir.path().string(), m.entries, 1 << 20), IsOk());
  EXPECT_TRUE(std::filesystem::exists(dir.File("model.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("model.safetensors.index.json")));
  auto c = SafetensorsCheckpoint::Open(dir.path().string());
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->num_files(), 1u);
  ExpectHolds(*c, m);
}

TEST(SafetensorsCheckpointTest, ShardsAboveTheLimitWithTransformersIndex) {
  ScratchDir dir;
  const Model m = MakeModel();
  // Limit 800: [embed 400 + layer 400], [lm_head 1200 alone: larger than the limit], [norm 40].
  ASSERT_THAT(WriteSafetensorsCheckpoint(dir.path().string(), m.entries, 800), IsOk());
  EXPECT_FALSE(std::filesystem::exists(dir.File("model.safetensors")));
  std::ifstream in(dir.File("model.safetensors.index.json"));
  const auto index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"], 2040);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.w"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00003-of-00003.safetensors");
  auto c = SafetensorsCheckpoint::Open(dir.path().string());
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(c->num_files(), 3u);
  EXPECT_THAT(c->FileOf("lm_head.weight"), HasSubstr("model-00002-of-00003.safetensors"));
  ExpectHolds(*c, m);

  // Saving again unsharded removes the shards and the index, leaving one unambiguous layout.
  ASSERT_THAT(WriteSafetensorsCheckpoint(dir.path().string(), m.entries, 1 << 20), IsOk());
  EXPECT_FALSE(std::filesystem::exists(dir.File("model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("model-00001-of-00003.safetensors")));
  auto single = SafetensorsCheckpoint::Open(dir.path().string());
  ASSERT_THAT(single, IsOk());
  EXPECT_EQ(single->num_files(), 1u);
  ExpectHolds(*single, m);
}

TEST(SafetensorsCheckpointTest, ReportsAnEmptyDirectoryAsNotFound) {
  ScratchDir dir;
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kNotFound,
                       AllOf(HasSubstr("model.safetensors"), HasSubstr("index.json"))));
}

TEST(SafetensorsCheckpointTest, NamesTheShardAndTensorOfABrokenIndex) {
  ScratchDir dir;
  const Model m = MakeModel();
  ASSERT_THAT(WriteSafetensorsCheckpoint(dir.path().string(), m.entries, 800), IsOk());
  const std::string index_path = dir.File("model.safetensors.index.json");
  std::ifstream in(index_path);
  auto index = nlohmann::json::parse(in);
  in.close();
  auto write_index = [&](const nlohmann::json& j) { std::ofstream(index_path) << j.dump(); };

  // A tensor the index maps to a shard that does not hold it.
  auto moved = index;
  moved["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  write_index(moved);
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kDataLoss,
                       AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("model-00001-of-00003"))));
  // A missing shard.
  auto missing = index;
  missing["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  write_index(missing);
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kNotFound,
                       AllOf(HasSubstr("model-00009-of-00009"), HasSubstr("'model.norm.weight'"))));
  // A path out of the directory.
  auto escape = index;
  escape["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_index(escape);
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kDataLoss, HasSubstr("not a file in the checkpoint")));
  // No weight_map; not JSON.
  write_index({{"metadata", {{"total_size", 1}}}});
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kDataLoss, HasSubstr("weight_map")));
  std::ofstream(index_path) << "{oops";
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(index_path), HasSubstr("JSON"))));

  // A truncated shard: the error names the shard file.
  write_index(index);
  const std::string shard = dir.File("model-00002-of-00003.safetensors");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 100);
  EXPECT_THAT(SafetensorsCheckpoint::Open(dir.path().string()),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(shard), HasSubstr("'lm_head.weight'"),
                                                    HasSubstr("truncated"))));
}

TEST(SafetensorsCheckpointTest, MissingTensorNamesTheDirectoryAndTensor) {
  ScratchDir dir;
  const Model m = MakeModel();
  ASSERT_THAT(WriteSafetensorsCheckpoint(dir.path().string(), m.entries, 1 << 20), IsOk());
  auto c = SafetensorsCheckpoint::Open(dir.path().string());
  ASSERT_THAT(c, IsOk());
  EXPECT_THAT(c->Tensor("model.layers.1.w"),
              StatusIs(StatusCode::kNotFound,
                       AllOf(HasSubstr(dir.path().string()), HasSubstr("'model.layers.1.w'"))));
}

}  // namespace
}  // namespace strata::nn
