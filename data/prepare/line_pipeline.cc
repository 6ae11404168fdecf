#include "data/prepare/line_pipeline.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace strata::data::internal {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void LineCounts::Add(const LineCounts& o) {
  examples += o.examples;
  skipped += o.skipped;
  truncated += o.truncated;
  blank_lines += o.blank_lines;
  tokens += o.tokens;
  loss_tokens += o.loss_tokens;
}

LinePipeline::LinePipeline(std::vector<std::string_view> lines, const std::string& file,
                           const ChatTemplate* chat, const TokenizeOptions& options,
                           std::FILE* tokens_out, std::FILE* mask_out)
    : lines_(std::move(lines)),
      file_(file),
      chat_(chat),
      options_(options),
      tokens_out_(tokens_out),
      mask_out_(mask_out) {}

// Note [Chunk order]: a chunk is rendered (by any thread, before or after the tokenizer is
// loaded), then tokenized by one thread, which stops at the chunk's first bad line. Fresh chunks
// are claimed in increasing order, so when chunk c holds an error every chunk before c is claimed
// by someone and finishes; chunks after the lowest erring one are skipped (they cannot hold the
// first error). Bytes reach the files only through Deliver, in chunk order, so neither the files
// nor the first error depend on which thread did what.
size_t LinePipeline::ClaimFresh() {
  if (abort_.load(std::memory_order_relaxed)) return kNone;
  const size_t c = next_fresh_.fetch_add(1, std::memory_order_relaxed);
  if (c >= chunks_.size() || c > first_error_chunk_.load(std::memory_order_relaxed)) return kNone;
  return c;
}

void LinePipeline::Render(Chunk& c) {
  c.lines.resize(static_cast<size_t>(c.end - c.begin));
  for (int64_t k = c.begin; k < c.end; ++k) {
    Line& line = c.lines[static_cast<size_t>(k - c.begin)];
    const std::string_view text = lines_[static_cast<size_t>(k)];
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) {
      line.blank = true;
      continue;
    }
    auto ex = ParseExampleLine(text, file_, k + 1);
    if (!ex.ok()) {
      line.parse = ex.status();
      c.lines.resize(static_cast<size_t>(k - c.begin + 1));  // nothing after it is needed
      return;
    }
    line.rendered = RenderExample(std::move(*ex), chat_, options_, file_, k + 1);
  }
}

void LinePipeline::Tokenize(size_t index, const ExampleTokenizer& et) {
  Chunk& c = chunks_[index];
  const size_t id_bytes = narrow_ ? 2 : 4;
  LineCounts n;  // counted here, stored once: the chunk next door is another thread's
  std::string ids, mask;
  for (size_t i = 0; i < c.lines.size(); ++i) {
    const Line& line = c.lines[i];
    const int64_t line_no = c.begin + static_cast<int64_t>(i) + 1;
    if (line.blank) {
      ++n.blank_lines;
      continue;
    }
    Result<ExampleTokens> toks = line.parse.ok() ? et.Tokenize(line.rendered, file_, line_no)
                                                 : Result<ExampleTokens>(line.parse);
    if (!toks.ok()) {
      c.error = toks.status();
      size_t first = first_error_chunk_.load(std::memory_order_relaxed);
      while (index < first && !first_error_chunk_.compare_exchange_weak(first, index)) {
      }
      break;
    }
    if (toks->skipped) {
      ++n.skipped;
      continue;
    }
    if (toks->ids.empty()) continue;
    ++n.examples;
    n.truncated += toks->truncated;
    const size_t count = toks->ids.size();
    const size_t at = mask.size();
    mask.resize(at + count);
    ids.resize((at + count) * id_bytes);
    int64_t loss_tokens = 0;
    for (size_t t = 0; t < count; ++t) {
      const uint32_t id = static_cast<uint32_t>(toks->ids[t]);
      if (narrow_) {
        const uint16_t narrow_id = static_cast<uint16_t>(id);
        std::memcpy(&ids[(at + t) * 2], &narrow_id, 2);  // little-endian host
      } else {
        std::memcpy(&ids[(at + t) * 4], &id, 4);
      }
      mask[at + t] = static_cast<char>((toks->loss[t] ? kMaskLoss : 0) | (t == 0 ? kMaskStart : 0));
      loss_tokens += toks->loss[t] != 0;
    }
    n.loss_tokens += loss_tokens;
    n.tokens += static_cast<int64_t>(count);
  }
  c.counts = n;
  c.ids = std::move(ids);
  c.mask = std::move(mask);
  std::vector<Line>().swap(c.lines);
  lines_done_.fetch_add(c.end - c.begin, std::memory_order_relaxed);
}

// Marks chunk `index` done and, unless another thread is writing, writes every chunk that is
// next in order and done (the one writing picks up chunks finished meanwhile before it stops).
void LinePipeline::Deliver(size_t index, ThreadTimes* t) {
  std::unique_lock lock(mu_);
  chunks_[index].ready = true;
  if (writing_) return;
  writing_ = true;
  while (next_write_ < chunks_.size() && chunks_[next_write_].ready && write_status_.ok() &&
         chunks_[next_write_].error.ok()) {
    Chunk& c = chunks_[next_write_++];
    lock.unlock();
    const double cpu0 = ThreadCpuSeconds();
    Status s;
    if (std::fwrite(c.ids.data(), 1, c.ids.size(), tokens_out_) != c.ids.size()) {
      s = ErrnoToStatus(errno, "write " + tokens_path_);
    } else if (std::fwrite(c.mask.data(), 1, c.mask.size(), mask_out_) != c.mask.size()) {
      s = ErrnoToStatus(errno, "write " + mask_path_);
    }
    std::string().swap(c.ids);
    std::string().swap(c.mask);
    t->write_cpu += ThreadCpuSeconds() - cpu0;
    lock.lock();
    if (!s.ok()) {
      write_status_ = s;
      abort_ = true;
    }
  }
  writing_ = false;
}

void LinePipeline::Work(bool load_first, const TokenizerLoader& load, ThreadTimes* t) {
  const double start_cpu = ThreadCpuSeconds();
  struct Total {
    ThreadTimes* t;
    double start;
    ~Total() { t->cpu = ThreadCpuSeconds() - start; }
  } total{t, start_cpu};
  if (load_first) {
    const double cpu0 = ThreadCpuSeconds();
    auto tok = load();
    phases_.load_cpu = ThreadCpuSeconds() - cpu0;
    {
      std::lock_guard lock(mu_);
      if (tok.ok()) {
        tokenizer_.emplace(std::move(*tok));
        narrow_ = tokenizer_->VocabSize() <= 65536;
        example_tokenizer_.emplace(&*tokenizer_, chat_, options_);
        tokenizer_state_.store(kReady, std::memory_order_release);
      } else {
        load_status_ = tok.status();
        abort_ = true;
        tokenizer_state_.store(kFailed, std::memory_order_release);
      }
    }
    tokenizer_cv_.notify_all();
  }
  for (;;) {
    const int state = tokenizer_state_.load(std::memory_order_acquire);
    if (state == kFailed || abort_.load(std::memory_order_relaxed)) return;
    if (state == kLoading) {
      const size_t c = ClaimFresh();
      if (c == kNone) {
        const auto t0 = std::chrono::steady_clock::now();
        std::unique_lock lock(mu_);
        tokenizer_cv_.wait(lock, [&] { return tokenizer_state_.load() != kLoading; });
        t->idle += Since(t0);
        continue;
      }
      const double cpu0 = ThreadCpuSeconds();
      Render(chunks_[c]);
      t->render_cpu += ThreadCpuSeconds() - cpu0;
      std::lock_guard lock(mu_);
      rendered_.push_back(c);
      continue;
    }
    size_t c = kNone;
    {
      std::lock_guard lock(mu_);
      if (!rendered_.empty()) {
        c = rendered_.front();
        rendered_.pop_front();
      }
    }
    if (c == kNone) {
      c = ClaimFresh();
      if (c == kNone) return;
      const double cpu0 = ThreadCpuSeconds();
      Render(chunks_[c]);
      t->render_cpu += ThreadCpuSeconds() - cpu0;
    }
    if (c > first_error_chunk_.load(std::memory_order_relaxed)) continue;  // cannot be first
    const double cpu0 = ThreadCpuSeconds();
    Tokenize(c, *example_tokenizer_);
    t->tokenize_cpu += ThreadCpuSeconds() - cpu0;
    Deliver(c, t);
  }
}

Status LinePipeline::Run(const TokenizerLoader& load, int threads, int64_t lines_per_chunk,
                         const std::string& tokens_path, const std::string& mask_path,
                         const PrepareProgress& progress) {
  tokens_path_ = tokens_path;
  mask_path_ = mask_path;
  const int64_t n = static_cast<int64_t>(lines_.size());
  threads = std::max(1, threads);
  if (lines_per_chunk <= 0) {
    // Many chunks per thread, so a slow chunk at the end costs little; at most 64 lines, so the
    // thread loading the tokenizer finds rendered chunks waiting.
    lines_per_chunk = std::clamp<int64_t>(n / (16 * threads), 1, 64);
  }
  for (int64_t b = 0; b < n; b += lines_per_chunk) {
    Chunk& c = chunks_.emplace_back();
    c.begin = b;
    c.end = std::min(n, b + lines_per_chunk);
  }
  threads = static_cast<int>(std::min<int64_t>(threads, static_cast<int64_t>(chunks_.size())));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<ThreadTimes> times(static_cast<size_t>(std::max(1, threads)));
  std::vector<std::thread> pool;
  // The first pool thread loads the tokenizer; with one thread the caller loads it.
  for (int w = 1; w < threads; ++w) {
    pool.emplace_back([&, w] { Work(w == 1, load, &times[static_cast<size_t>(w)]); });
  }
  std::atomic<bool> finished{false};
  std::thread reporter;
  if (progress) {
    reporter = std::thread([&] {
      while (!finished.load()) {
        progress(lines_done_.load(), n);
        for (int k = 0; k < 10 && !finished.load(); ++k) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    });
  }
  Work(threads == 1, load, &times[0]);
  for (auto& t : pool) t.join();
  if (progress) {
    finished = true;
    reporter.join();
    progress(lines_done_.load(), n);
  }
  phases_.lines_seconds = Since(t0);
  for (const ThreadTimes& t : times) {
    phases_.render_cpu += t.render_cpu;
    phases_.tokenize_cpu += t.tokenize_cpu;
    phases_.write_cpu += t.write_cpu;
    phases_.idle_seconds += t.idle;
    phases_.busiest_thread_seconds = std::max(phases_.busiest_thread_seconds, t.cpu + t.idle);
  }
  if (!load_status_.ok()) return load_status_;
  if (const size_t e = first_error_chunk_.load(); e != kNone) return chunks_[e].error;
  STRATA_RETURN_IF_ERROR(write_status_);
  for (const Chunk& c : chunks_) counts_.Add(c.counts);
  return Status::Ok();
}

}  // namespace strata::data::internal
