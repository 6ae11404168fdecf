// Token files (nanoGPT raw uint16/uint32, llm.c with its header, byte-level text) and the seeded
// sequence sampler: ids read back as written, windows reproducible from the seed, bounds checked.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models/data/sequence_sampler.h"
#include "models/data/token_file.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_util.h"

namespace strata::data {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ScratchDir;
using ::strata::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
void AppendLE(std::string* out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xFF));
  }
}

// Written byte by byte, little-endian, as numpy's tofile() does on x86.
template <typename T>
std::string RawIds(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) AppendLE(&s, static_cast<T>(id));
  return s;
}

// llm.c's write_datafile: 256 int32 header {magic, version, count, 0...} then the ids.
std::string Llmc(const std::vector<uint32_t>& ids, int32_t version, int32_t count = -1) {
  std::string s;
  AppendLE(&s, kLlmcMagic);
  AppendLE(&s, version);
  AppendLE(&s, count < 0 ? static_cast<int32_t>(ids.size()) : count);
  s.resize(kLlmcHeaderBytes, '\0');
  return s + (version == 1 ? RawIds<uint16_t>(ids) : RawIds<uint32_t>(ids));
}

std::string Write(const ScratchDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.File(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<int32_t> ReadAll(const TokenFile& f) {
  std::vector<int32_t> out(static_cast<size_t>(f.size()));
  EXPECT_THAT(f.Read(0, f.size(), out.data()), IsOk());
  return out;
}

TEST(TokenFileTest, ReadsNanoGptUint16ByDefaultForBin) {
  ScratchDir dir;
  const std::string path = Write(dir, "train.bin", RawIds<uint16_t>({0, 1, 50256, 65535, 7}));
  auto f = TokenFile::Open(path);
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->format(), TokenFormat::kUint16);
  EXPECT_EQ(f->id_bytes(), 2u);
  EXPECT_THAT(ReadAll(*f), ElementsAre(0, 1, 50256, 65535, 7));
}

TEST(TokenFileTest, ReadsUint32WhenToldSo) {
  ScratchDir dir;
  const std::string path = Write(dir, "ids.bin", RawIds<uint32_t>({128000, 3, 70000}));
  auto f = TokenFile::Open(path, TokenFormat::kUint32);
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(ReadAll(*f), ElementsAre(128000, 3, 70000));
}

TEST(TokenFileTest, ReadsLlmcHeadersOfBothVersions) {
  ScratchDir dir;
  auto v1 = TokenFile::Open(Write(dir, "gpt2.bin", Llmc({5, 6, 50000}, 1)));
  ASSERT_THAT(v1, IsOk());
  EXPECT_EQ(v1->format(), TokenFormat::kLlmc);
  EXPECT_EQ(v1->id_bytes(), 2u);
  EXPECT_THAT(ReadAll(*v1), ElementsAre(5, 6, 50000));
  auto v2 =
      TokenFile::Open(Write(dir, "llama3.bin", Llmc({128255, 1, 2, 3}, 2)), TokenFormat::kLlmc);
  ASSERT_THAT(v2, IsOk());
  EXPECT_EQ(v2->id_bytes(), 4u);
  EXPECT_THAT(ReadAll(*v2), ElementsAre(128255, 1, 2, 3));
}

TEST(TokenFileTest, ReadsPlainTextAsBytes) {
  ScratchDir dir;
  const std::string text = "To be,\n\xC3\xA9";  // bytes above 127 stay 0-255
  auto f = TokenFile::Open(Write(dir, "play.txt", text));
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->format(), TokenFormat::kBytes);
  EXPECT_THAT(ReadAll(*f), ElementsAre('T', 'o', ' ', 'b', 'e', ',', '\n', 0xC3, 0xA9));
}

TEST(TokenFileTest, RefusesMalformedFilesNamingThem) {
  ScratchDir dir;
  const std::string odd = Write(dir, "odd.bin", std::string(5, '\1'));
  EXPECT_THAT(TokenFile::Open(odd),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(odd), HasSubstr("uint16"))));
  const std::string short_count = Write(dir, "short.bin", Llmc({1, 2, 3}, 1, /*count=*/4));
  EXPECT_THAT(
      TokenFile::Open(short_count),
      StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(short_count), HasSubstr("says 4 tokens"))));
  const std::string version = Write(dir, "v9.bin", Llmc({1, 2}, 1));
  {
    std::fstream f(version, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4);
    f.put(9);
  }
  EXPECT_THAT(TokenFile::Open(version),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(version), HasSubstr("version 9"))));
  const std::string plain = Write(dir, "plain.bin", RawIds<uint16_t>({1, 2}));
  EXPECT_THAT(TokenFile::Open(plain, TokenFormat::kLlmc),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(plain), HasSubstr("no llm.c header"))));
  const std::string empty = Write(dir, "empty.txt", "");
  EXPECT_THAT(TokenFile::Open(empty),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr(empty), HasSubstr("empty"))));
  EXPECT_THAT(TokenFile::Open(dir.File("absent.bin")),
              StatusIs(StatusCode::kNotFound, HasSubstr("absent.bin")));
  EXPECT_THAT(ParseTokenFormat("int8"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("auto, llmc, uint16, uint32")));
}

TEST(TokenFileTest, ChecksRangesAndTheVocabulary) {
  ScratchDir dir;
  auto f = TokenFile::Open(Write(dir, "v.bin", RawIds<uint16_t>({1, 2, 300, 4})));
  ASSERT_THAT(f, IsOk());
  std::vector<int32_t> out(4);
  EXPECT_THAT(f->Read(2, 3, out.data()),
              StatusIs(StatusCode::kInvalidArgument, AllOf(HasSubstr("[2, 5)"), HasSubstr("4"))));
  EXPECT_THAT(f->Read(-1, 1, out.data()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("v.bin")));
  EXPECT_THAT(f->Read(0, 4, out.data(), /*vocab_size=*/256),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("token 300 at position 2"), HasSubstr("256"))));
  EXPECT_THAT(f->Read(0, 4, out.data(), /*vocab_size=*/301), IsOk());
}

TEST(TokenFileTest, ShippedTextIsByteLevelAndSamples) {
  const std::string path = std::string(STRATA_SOURCE_DIR) + "/models/data/text/shakespeare.txt";
  auto f = TokenFile::Open(path);
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->format(), TokenFormat::kBytes);
  EXPECT_GT(f->size(), 50'000);
  auto s = SequenceSampler::Create(&*f, 256, 1, /*vocab_size=*/128);  // plain ASCII
  ASSERT_THAT(s, IsOk());
  std::vector<int32_t> in(8 * 256), tg(8 * 256);
  EXPECT_THAT(s->Next(8, in, tg), IsOk());
}

// Every id equals its position (mod 2^16), so a window's content tells where it starts.
std::string Ramp(int n) {
  std::vector<uint32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  return RawIds<uint16_t>(ids);
}

TEST(SequenceSamplerTest, WindowsAreConsecutiveIdsWithNextTokenTargets) {
  ScratchDir dir;
  auto f = TokenFile::Open(Write(dir, "ramp.bin", Ramp(1000)));
  ASSERT_THAT(f, IsOk());
  auto s = SequenceSampler::Create(&*f, 16, /*seed=*/7);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->num_starts(), 1000 - 16);
  std::vector<int32_t> in(4 * 16), tg(4 * 16);
  ASSERT_THAT(s->Next(4, in, tg), IsOk());
  for (int b = 0; b < 4; ++b) {
    const int32_t start = in[static_cast<size_t>(b * 16)];
    EXPECT_EQ(start, s->Start(static_cast<uint64_t>(b)));
    for (int t = 0; t < 16; ++t) {
      EXPECT_EQ(in[static_cast<size_t>(b * 16 + t)], start + t);
      EXPECT_EQ(tg[static_cast<size_t>(b * 16 + t)], start + t + 1);
    }
  }
  EXPECT_EQ(s->position(), 4u);
  // Hugging Face style: labels are the inputs (the model shifts them).
  std::vector<int32_t> in2(16), lb(16);
  s->set_position(0);
  ASSERT_THAT(s->Next(1, in2, lb, LabelStyle::kHuggingFace), IsOk());
  EXPECT_EQ(in2, lb);
  EXPECT_EQ(in2[0], in[0]);
}

TEST(SequenceSamplerTest, HuggingFaceWindowsHoldSeqLenIdsAndReachEveryId) {
  ScratchDir dir;
  // A stream of exactly seq_len ids is one window: every id is an input, seq_len - 1 are scored.
  auto f = TokenFile::Open(Write(dir, "ramp.bin", Ramp(16)));
  ASSERT_THAT(f, IsOk());
  auto s = SequenceSampler::Create(&*f, 16, /*seed=*/3, 0, LabelStyle::kHuggingFace);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->num_starts(), 1);
  std::vector<int32_t> in(16), lb(16);
  ASSERT_THAT(s->Next(1, in, lb), IsOk());
  for (int t = 0; t < 16; ++t) EXPECT_EQ(in[static_cast<size_t>(t)], t);
  EXPECT_EQ(in, lb);
  // A longer stream: N - seq_len + 1 starts, the last window ending at the last id.
  auto g = TokenFile::Open(Write(dir, "ramp2.bin", Ramp(100)));
  ASSERT_THAT(g, IsOk());
  auto h = SequenceSampler::Create(&*g, 16, 3, 0, LabelStyle::kHuggingFace);
  ASSERT_THAT(h, IsOk());
  EXPECT_EQ(h->num_starts(), 100 - 16 + 1);
  bool saw_last = false;
  for (uint64_t i = 0; i < 2000; ++i) saw_last = saw_last || h->Start(i) == 100 - 16;
  EXPECT_TRUE(saw_last);
  // Next-token targets need an id after the window: refused, saying why.
  std::vector<int32_t> tg(16);
  Status st = s->Next(1, in, tg, LabelStyle::kNextToken);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(st.message(), ::testing::HasSubstr("no id after the last"));
  // Too short for one window names the window.
  auto tiny = TokenFile::Open(Write(dir, "ramp3.bin", Ramp(15)));
  ASSERT_THAT(tiny, IsOk());
  auto bad = SequenceSampler::Create(&*tiny, 16, 3, 0, LabelStyle::kHuggingFace);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::HasSubstr("seq_len = 16"));
}

TEST(SequenceSamplerTest, SameSeedSameSamplesAndResumesFromAPosition) {
  ScratchDir dir;
  auto f = TokenFile::Open(Write(dir, "ramp.bin", Ramp(5000)));
  ASSERT_THAT(f, IsOk());
  auto a = SequenceSampler::Create(&*f, 8, 42);
  auto b = SequenceSampler::Create(&*f, 8, 42);
  auto c = SequenceSampler::Create(&*f, 8, 43);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  std::vector<int32_t> ia(6 * 8), ta(6 * 8), ib(6 * 8), tb(6 * 8), ic(6 * 8), tc(6 * 8);
  ASSERT_THAT(a->Next(6, ia, ta), IsOk());
  ASSERT_THAT(b->Next(6, ib, tb), IsOk());
  ASSERT_THAT(c->Next(6, ic, tc), IsOk());
  EXPECT_EQ(ia, ib);
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ia, ic);
  // Resuming at sample 3 gives rows 3..5 of the first run.
  auto r = SequenceSampler::Create(&*f, 8, 42);
  ASSERT_THAT(r, IsOk());
  r->set_position(3);
  std::vector<int32_t> ir(3 * 8), tr(3 * 8);
  ASSERT_THAT(r->Next(3, ir, tr), IsOk());
  EXPECT_TRUE(std::equal(ir.begin(), ir.end(), ia.begin() + 3 * 8));
}

TEST(SequenceSamplerTest, StartsCoverTheWholeRangeAndStayInBounds) {
  ScratchDir dir;
  // 20 tokens, seq_len 4: starts 0..15, the last window [15, 20) ends at the file's end.
  auto f = TokenFile::Open(Write(dir, "small.bin", Ramp(20)));
  ASSERT_THAT(f, IsOk());
  auto s = SequenceSampler::Create(&*f, 4, 1);
  ASSERT_THAT(s, IsOk());
  std::set<int64_t> seen;
  for (uint64_t i = 0; i < 2000; ++i) {
    const int64_t start = s->Start(i);
    ASSERT_GE(start, 0);
    ASSERT_LE(start, 15);
    seen.insert(start);
  }
  EXPECT_EQ(seen.size(), 16u);  // every start is drawn
  std::vector<int32_t> in(2000 * 4), tg(2000 * 4);
  EXPECT_THAT(s->Next(2000, in, tg), IsOk());
}

TEST(SequenceSamplerTest, RefusesShortFilesBadSpansAndOutOfVocabularyIds) {
  ScratchDir dir;
  auto f = TokenFile::Open(Write(dir, "tiny.bin", Ramp(300)));
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(SequenceSampler::Create(&*f, 300, 1),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tiny.bin"), HasSubstr("holds 300 tokens"))));
  EXPECT_THAT(SequenceSampler::Create(&*f, 0, 1),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("at least 1")));
  auto s = SequenceSampler::Create(&*f, 64, 1, /*vocab_size=*/256);
  ASSERT_THAT(s, IsOk());
  std::vector<int32_t> in(64), tg(63);
  EXPECT_THAT(s->Next(1, in, tg), StatusIs(StatusCode::kInvalidArgument, HasSubstr("63")));
  // Ids 256..299 are outside a 256-token vocabulary: some of 200 windows reach them.
  std::vector<int32_t> in2(200 * 64), tg2(200 * 64);
  EXPECT_THAT(s->Next(200, in2, tg2),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tiny.bin"), HasSubstr("outside the vocabulary of 256"))));
}

}  // namespace
}  // namespace strata::data
