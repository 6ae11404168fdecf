#include "tokenizers/bpe.h"

#include <atomic>
#include <cstdio>
#include <queue>

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {
namespace {

Status CheckAbsentOrEmpty(const Json& node, std::string_view path, const char* key) {
  if (!node.contains(key) || node[key].is_null()) return Status::Ok();
  if (node[key].is_string() && node[key].get<std::string>().empty()) return Status::Ok();
  return Unsupported(JoinPath(path, key), node[key].dump(), "only null or \"\" is supported");
}

// A thread's recent pieces -> ids, for one model at a time (a thread switching models starts
// afresh). Bounded: cleared when full, as pieces follow a Zipf law and the hot ones come back.
struct PieceCache {
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxPieceBytes = 64;
  uint64_t serial = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

std::atomic<uint64_t> next_serial{1};

}  // namespace

void BpeModel::MergeTable::Reserve(size_t n) {
  size_t cap = 16;
  int bits = 4;
  while (cap < 2 * n) {
    cap <<= 1;
    ++bits;
  }
  slots_.assign(cap, Entry{});
  mask_ = cap - 1;
  shift_ = 64 - bits;
}

void BpeModel::MergeTable::Insert(uint64_t key, Merge m) {
  for (size_t i = Slot(key);; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key) return;
    if (e.key == kEmpty) {
      e.key = key;
      e.merge = m;
      return;
    }
  }
}

Result<BpeModel> BpeModel::FromJson(const Json& node, std::string_view path, BpeTables* tables) {
  STRATA_RETURN_IF_ERROR(GetType(node, path, {"BPE"}));
  if (node.contains("dropout") && !node["dropout"].is_null() &&
      !(node["dropout"].is_number() && node["dropout"].get<double>() == 0.0)) {
    return Unsupported(JoinPath(path, "dropout"), node["dropout"].dump(),
                       "BPE dropout is for training tokenizers; only null is supported");
  }
  STRATA_RETURN_IF_ERROR(CheckAbsentOrEmpty(node, path, "continuing_subword_prefix"));
  STRATA_RETURN_IF_ERROR(CheckAbsentOrEmpty(node, path, "end_of_word_suffix"));
  BpeModel m;
  m.serial_ = next_serial.fetch_add(1);
  STRATA_ASSIGN_OR_RETURN(m.fuse_unk_, GetBool(node, path, "fuse_unk", false));
  STRATA_ASSIGN_OR_RETURN(m.byte_fallback_, GetBool(node, path, "byte_fallback", false));
  STRATA_ASSIGN_OR_RETURN(m.ignore_merges_, GetBool(node, path, "ignore_merges", false));
  STRATA_ASSIGN_OR_RETURN(m.unk_token_, GetString(node, path, "unk_token", ""));

  if (tables != nullptr) {
    STRATA_RETURN_IF_ERROR(m.BuildTables(std::move(*tables), path));
    return m;
  }
  // The tree's vocab and merges, checked, as tables.
  BpeTables t;
  const std::string vocab_path = JoinPath(path, "vocab");
  if (!node.contains("vocab") || !node["vocab"].is_object()) {
    return InvalidArgumentError(vocab_path + ": expected an object {token: id}");
  }
  const Json& vocab = node["vocab"];
  t.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX) {
      return InvalidArgumentError(vocab_path + "['" + it.key() +
                                  "']: expected a non-negative 32-bit id, got " +
                                  it.value().dump());
    }
    t.vocab.emplace_back(t.Add(it.key()), static_cast<int32_t>(it.value().get<int64_t>()));
  }
  STRATA_ASSIGN_OR_RETURN(const Json* merges, GetArray(node, path, "merges"));
  const std::string merges_path = JoinPath(path, "merges");
  t.merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    if (e.is_string()) {  // "a b" (older files)
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgumentError(IndexPath(merges_path, i) + ": expected \"left right\", got '" +
                                    s + "'");
      }
      t.merges.emplace_back(t.Add(s.substr(0, sp)), t.Add(s.substr(sp + 1)));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      t.merges.emplace_back(t.Add(e[0].get<std::string>()), t.Add(e[1].get<std::string>()));
    } else {
      return InvalidArgumentError(IndexPath(merges_path, i) +
                                  ": expected \"left right\" or [left, right], got " + e.dump());
    }
  }
  STRATA_RETURN_IF_ERROR(m.BuildTables(std::move(t), path));
  return m;
}

Status BpeModel::BuildTables(BpeTables t, std::string_view path) {
  BpeModel& m = *this;
  // A token listed twice keeps its last id, as a JSON object's repeated key does.
  m.vocab_.reserve(t.vocab.size());
  int64_t max_id = -1;
  for (const auto& [token, id] : t.vocab) {
    max_id = std::max<int64_t>(max_id, id);
    m.vocab_.insert_or_assign(std::string(t.View(token)), id);
  }
  m.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : m.vocab_) m.id_to_token_[static_cast<size_t>(id)] = token;

  m.byte_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = m.TokenToId(name)) m.byte_ids_[b] = *id;
  }
  if (!m.unk_token_.empty()) {
    m.unk_id_ = m.TokenToId(m.unk_token_);
    if (!m.unk_id_) {
      return InvalidArgumentError(JoinPath(path, "unk_token") + ": '" + m.unk_token_ +
                                  "' is not in the vocabulary");
    }
  }

  const std::string merges_path = JoinPath(path, "merges");
  m.merges_.Reserve(t.merges.size());
  // Note [Metaspace words]: the merges may not join "...x" + "▁...".
  constexpr std::string_view kMeta = "\xE2\x96\x81";
  m.metaspace_words_ = true;
  std::string joined;
  for (size_t i = 0; i < t.merges.size(); ++i) {
    const std::string_view a = t.View(t.merges[i].first), b = t.View(t.merges[i].second);
    joined.assign(a).append(b);
    const auto ia = m.TokenToId(a), ib = m.TokenToId(b), iab = m.TokenToId(joined);
    if (!ia || !ib || !iab) {
      return InvalidArgumentError(IndexPath(merges_path, i) + ": '" +
                                  std::string(!ia   ? a
                                              : !ib ? b
                                                    : std::string_view(joined)) +
                                  "' is not in the vocabulary");
    }
    // A repeated pair keeps its first (lowest) rank, as Hugging Face's loader does.
    m.merges_.Insert(PairKey(*ia, *ib), Merge{static_cast<int32_t>(i), *iab});
    const bool a_ends_meta = a.size() >= 3 && a.compare(a.size() - 3, 3, kMeta) == 0;
    if (b.compare(0, 3, kMeta) == 0 && !a_ends_meta) m.metaspace_words_ = false;
  }
  return Status::Ok();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= size() || id_to_token_[static_cast<size_t>(id)].empty()) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

Status BpeModel::Characters(std::string_view piece, std::vector<int32_t>* symbols) const {
  bool last_unk = false;
  for (size_t i = 0; i < piece.size();) {
    const size_t len = static_cast<size_t>(Utf8SeqLen(static_cast<unsigned char>(piece[i])));
    const std::string_view ch = piece.substr(i, len);
    i += len;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      symbols->push_back(it->second);
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : ch) all &= byte_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : ch) symbols->push_back(byte_ids_[c]);
        last_unk = false;
        continue;
      }
    }
    if (!unk_id_) {
      return InvalidArgumentError("the character '" + std::string(ch) +
                                  "' is not in the vocabulary and the model has neither "
                                  "byte_fallback nor an unk_token");
    }
    if (!(fuse_unk_ && last_unk)) symbols->push_back(*unk_id_);
    last_unk = true;
  }
  return Status::Ok();
}

Status BpeModel::Tokenize(std::string_view piece, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      ids->push_back(it->second);
      return Status::Ok();
    }
  }
  if (!metaspace_words_) return TokenizeWord(piece, ids);
  // Note [Metaspace words]: cut before each "▁" that follows another character.
  constexpr std::string_view kMeta = "\xE2\x96\x81";
  size_t start = 0;
  for (size_t i = 1; i + 3 <= piece.size(); ++i) {
    const bool after_meta = i >= 3 && piece.compare(i - 3, 3, kMeta) == 0;
    if (!after_meta && piece.compare(i, 3, kMeta) == 0) {
      STRATA_RETURN_IF_ERROR(TokenizeWord(piece.substr(start, i - start), ids));
      start = i;
    }
  }
  return TokenizeWord(piece.substr(start), ids);
}

Status BpeModel::TokenizeWord(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.size() > PieceCache::kMaxPieceBytes) return MergePiece(piece, ids);
  thread_local PieceCache cache;
  if (cache.serial != serial_) {
    cache.map.clear();
    cache.serial = serial_;
  }
  if (auto it = cache.map.find(piece); it != cache.map.end()) {
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return Status::Ok();
  }
  const size_t before = ids->size();
  STRATA_RETURN_IF_ERROR(MergePiece(piece, ids));
  if (cache.map.size() >= PieceCache::kMaxEntries) cache.map.clear();
  cache.map.emplace(std::string(piece), std::vector<int32_t>(ids->begin() + before, ids->end()));
  return Status::Ok();
}

Status BpeModel::MergePiece(std::string_view piece, std::vector<int32_t>* ids) const {
  thread_local std::vector<int32_t> sym;
  sym.clear();
  STRATA_RETURN_IF_ERROR(Characters(piece, &sym));
  const int n = static_cast<int>(sym.size());
  if (n <= 1) {
    ids->insert(ids->end(), sym.begin(), sym.end());
    return Status::Ok();
  }
  // Symbols as a linked list; candidate merges in a min-heap by (rank, position). A popped
  // candidate is stale when its left symbol was absorbed or its right neighbour changed.
  thread_local std::vector<int> next, prev;
  next.resize(n);
  prev.resize(n);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Cand {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto consider = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = merges_.Find(PairKey(sym[pos], sym[next[pos]]))) {
      heap.push({m->rank, pos, m->new_id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (gone[c.pos] || next[c.pos] < 0) continue;
    const int right = next[c.pos];
    const Merge* m = merges_.Find(PairKey(sym[c.pos], sym[right]));
    if (m == nullptr || m->new_id != c.new_id) continue;
    sym[c.pos] = c.new_id;
    gone[right] = true;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) ids->push_back(sym[i]);
  return Status::Ok();
}

}  // namespace strata::tokenizers::internal
