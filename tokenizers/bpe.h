// BpeModel: tokenizer.json's "model" of type BPE, as Hugging Face `tokenizers` runs it: a piece
// is split into characters (unknown ones to <0xNN> byte tokens with byte_fallback, else to
// unk_token, consecutive unknowns fused with fuse_unk), then adjacent symbols are merged lowest
// merge rank first (leftmost among equals) until no listed merge applies. With ignore_merges
// (Llama 3) a piece that is itself in the vocabulary is emitted whole. Dropout, word prefixes and
// suffixes are refused naming their JSON path. Immutable; Tokenize may run on many threads: each
// thread keeps its own cache of recent pieces (as Hugging Face's BPE does), so repeated words cost
// one hash look-up.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizers/text/json_node.h"

namespace strata::tokenizers::internal {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A BPE model's vocab (token, id) and merges (left, right) in file order, as tokenizer_json.h
// streams them out of tokenizer.json without building a JSON tree.
// The strings live in one arena (a few growths of one buffer, not one allocation per token).
struct BpeTables {
  struct Span {
    uint32_t offset = 0, size = 0;
  };
  std::string arena;
  std::vector<std::pair<Span, int32_t>> vocab;
  std::vector<std::pair<Span, Span>> merges;

  Span Add(std::string_view s) {
    Span span{static_cast<uint32_t>(arena.size()), static_cast<uint32_t>(s.size())};
    arena.append(s);
    return span;
  }
  std::string_view View(Span s) const { return std::string_view(arena).substr(s.offset, s.size); }
};

class BpeModel {
 public:
  // `node` is tokenizer.json's "model". With `tables`, its vocab and merges are taken (moved)
  // from there and node's own "vocab" / "merges" are not read.
  static Result<BpeModel> FromJson(const Json& node, std::string_view path,
                                   BpeTables* tables = nullptr);

  // Appends the ids of `piece` (non-empty, valid UTF-8). Fails on a character the vocabulary
  // cannot express when there is neither byte_fallback nor unk_token.
  Status Tokenize(std::string_view piece, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // nullptr for an id outside the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest vocabulary id.
  int64_t size() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  Status Characters(std::string_view piece, std::vector<int32_t>* symbols) const;
  Status MergePiece(std::string_view piece, std::vector<int32_t>* ids) const;
  Status TokenizeWord(std::string_view word, std::vector<int32_t>* ids) const;
  Status BuildTables(BpeTables tables, std::string_view path);

  // Note [Metaspace words]: sentencepiece-style vocabularies (Llama 2, Mistral) have no pre-
  // tokenizer, so a whole document is one piece. When no merge joins a left symbol ending in a
  // character other than "▁" to a right symbol starting with "▁" (checked at load), no merge can
  // ever cross such a boundary, and merging each stretch between them alone gives the same ids
  // as merging the whole piece; the stretches are words, which the piece cache then serves.
  bool metaspace_words_ = false;

  // Tells this model's entries apart in the per-thread piece caches (an address could be reused
  // by a later model; a serial number is not).
  uint64_t serial_ = 0;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  // Merges by (left id, right id), open addressing in one flat array: the merge loop's look-ups
  // cost one cache line each (a node-based map cost three).
  class MergeTable {
   public:
    void Reserve(size_t n);
    // Keeps the first (lowest-rank) entry for a repeated pair.
    void Insert(uint64_t key, Merge m);
    const Merge* Find(uint64_t key) const {
      for (size_t i = Slot(key);; i = (i + 1) & mask_) {
        const Entry& e = slots_[i];
        if (e.key == key) return &e.merge;
        if (e.key == kEmpty) return nullptr;
      }
    }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    struct Entry {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    size_t Slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
    std::vector<Entry> slots_;
    size_t mask_ = 0;
    int shift_ = 64;
  };
  MergeTable merges_;
  std::string unk_token_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids (-1 when absent)
};

}  // namespace strata::tokenizers::internal
