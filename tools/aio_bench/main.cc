// aio_bench: tune a disk for Strata before training. Sweeps block size x queue depth x threads x
// engine x {read, write} with O_DIRECT on a given directory, verifies the data, prints a table
// (GB/s, IOPS, latency p50/p99), writes JSON, and with --emit-config prints the best `aio`
// section ready to paste into a config. Run with --help for the flags.
//
// Messages go to stderr with one "aio_bench: " prefix (Say); statuses built below carry none. A
// failed run prints no result: with --json, stdout gets {"error": ..., "code": ...} and the exit
// code is non-zero (2 before any I/O, 1 during the run).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "aio/engine/io_engine.h"
#include "core/units.h"
#include "tools/aio_bench/args.h"
#include "tools/aio_bench/bench_runner.h"
#include "tools/aio_bench/pattern.h"
#include "tools/aio_bench/report.h"
#include "tools/aio_bench/target.h"

namespace strata::aio_bench {
namespace {

char g_cleanup_path[4096];

void OnSignal(int sig) {
  if (g_cleanup_path[0] != 0) unlink(g_cleanup_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void Say(const std::string& message) { std::fprintf(stderr, "aio_bench: %s\n", message.c_str()); }

std::string Describe(const PointSpec& s) {
  return std::string(IoEngineKindName(s.aio.engine)) + " " +
         (s.op == IoOp::kRead ? "read" : "write") + " bs=" + FormatBytes(s.aio.block_size) +
         " qd=" + std::to_string(s.aio.queue_depth) +
         " threads=" + std::to_string(s.aio.thread_count);
}

std::vector<PointSpec> Points(const Args& a, const std::string& file) {
  std::vector<PointSpec> pts;
  std::vector<IoOp> ops;
  if (a.op != "read") ops.push_back(IoOp::kWrite);
  if (a.op != "write") ops.push_back(IoOp::kRead);
  auto add = [&](PointSpec s) {
    s.file = file;
    for (IoOp op : ops) {
      s.op = op;
      pts.push_back(s);
    }
  };
  if (a.sweep.empty()) {
    add(a.base);
    return pts;
  }
  std::vector<IoEngineKind> engines{IoEngineKind::kIoUring, IoEngineKind::kLibaio};
  std::vector<size_t> blocks{1 << 20, 4 << 20};
  std::vector<int> qds{8, 32};
  std::vector<int> threads{1, 2};
  if (a.sweep == "full") {
    blocks = {128 << 10, 256 << 10, 1 << 20, 4 << 20, 8 << 20};
    qds = {2, 4, 8, 16, 32, 64};
    threads = {1, 2, 4};
  }
  for (auto e : engines)
    for (auto b : blocks)
      for (int q : qds)
        for (int t : threads) {
          PointSpec s = a.base;
          s.aio.engine = e;
          s.aio.block_size = b;
          s.aio.queue_depth = q;
          s.aio.thread_count = t;
          add(s);
        }
  return pts;
}

// Shows progress on stderr: a bar on a terminal, else one line per point (nothing if quiet).
class Progress {
 public:
  explicit Progress(bool quiet) : quiet_(quiet), bar_(!quiet && isatty(2)) {}
  ~Progress() { Clear(); }
  void Start(const std::string& what, size_t i, size_t n) {
    label_ = "point " + std::to_string(i + 1) + "/" + std::to_string(n);
    if (!quiet_ && !bar_) Say(label_ + ": " + what);
  }
  void SetLabel(std::string label) { label_ = std::move(label); }
  void Update(uint64_t done, uint64_t total) {
    if (!bar_) return;
    const int pct = static_cast<int>(100.0 * static_cast<double>(done) / total);
    std::fprintf(stderr, "\r[%-20.*s] %3d%%  %s", pct / 5, "####################", pct,
                 label_.c_str());
    shown_ = true;
  }
  void Clear() {
    if (shown_) std::fprintf(stderr, "\r%60s\r", "");
    shown_ = false;
  }
  bool quiet() const { return quiet_; }

 private:
  bool quiet_, bar_, shown_ = false;
  std::string label_;
};

struct RunState {
  bool written = false;     // a write of this run (or the layout) filled the file
  bool probed = false;      // the pattern was looked for once
  bool verify_off = false;  // a foreign file: its reads are not verified
  std::string verify_note;  // why, for the JSON document
};

// Before the first read that no write of this run precedes: lays out aio_bench's own file
// (written and synced with the point's settings, not timed, as fio lays out its file), or looks
// for aio_bench's pattern in the user's file, turning verification off (said once) if absent.
Status PrepareRead(const Target& t, const PointSpec& spec, Progress& progress, RunState* st) {
  if (st->written) return Status::Ok();
  if (t.own_file) {
    if (!progress.quiet()) {
      Say("laying out " + t.file + " (" + FormatBytes(spec.file_size) + ") to read; not timed");
    }
    PointSpec w = spec;
    w.op = IoOp::kWrite;
    progress.SetLabel("laying out the file to read");
    auto r = RunPoint(w, [&](uint64_t done) { progress.Update(done, w.file_size); });
    progress.Clear();
    if (!r.ok()) return r.status().WithContext("lay out " + t.file + " to read");
    st->written = true;
    return Status::Ok();
  }
  if (!spec.verify || st->probed) return Status::Ok();
  st->probed = true;
  STRATA_ASSIGN_OR_RETURN(bool ours, HoldsPattern(t.file, spec.file_size));
  if (!ours) {
    st->verify_off = true;
    st->verify_note = t.file + " does not hold aio_bench's pattern (none of up to " +
                      std::to_string(kProbeBlocks) +
                      " blocks probed is stamped): read without verification";
    Say(st->verify_note);
  }
  return Status::Ok();
}

Status RunAll(const Target& t, const std::vector<PointSpec>& points, Progress& progress,
              RunState* st, std::vector<Row>* rows) {
  for (size_t i = 0; i < points.size(); ++i) {
    PointSpec spec = points[i];
    const std::string where = "point " + std::to_string(i + 1) + "/" +
                              std::to_string(points.size()) + " (" + Describe(spec) + ")";
    if (spec.op == IoOp::kRead) {
      STRATA_RETURN_IF_ERROR(PrepareRead(t, spec, progress, st).WithContext(where));
      if (st->verify_off) spec.verify = false;
    }
    progress.Start(Describe(spec), i, points.size());
    auto r = RunPoint(spec, [&](uint64_t done) { progress.Update(done, spec.file_size); });
    progress.Clear();
    if (!r.ok()) return r.status().WithContext(where);
    if (spec.op == IoOp::kWrite) st->written = true;
    rows->push_back({spec, *r});
  }
  return Status::Ok();
}

nlohmann::json ResultDoc(const Args& a, const std::vector<Row>& rows, const RunState& st) {
  nlohmann::json doc;
  if (rows.size() == 1 && a.sweep.empty()) {
    doc = RowJson(rows.front());
  } else {
    doc["points"] = nlohmann::json::array();
    for (const Row& r : rows) doc["points"].push_back(RowJson(r));
    doc["best"] = BestConfig(rows);
  }
  if (st.verify_off) doc["verify_note"] = st.verify_note;
  if (a.json && a.emit_config) {
    nlohmann::json best = BestConfig(rows);
    best.erase("measured");
    doc["config"] = best;
  }
  return doc;
}

nlohmann::json ErrorDoc(const Status& s) {
  return nlohmann::json{{"error", s.ToString()}, {"code", StatusCodeName(s.code())}};
}

// Writes `doc` to --json-out; false (said) if it cannot.
bool WriteJsonOut(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  out.close();
  if (!out) Say("cannot write " + path);
  return static_cast<bool>(out);
}

// A failed run: one line on stderr; with --json an error object on stdout (and in --json-out),
// never a document that reads as a measurement.
int Fail(const Args& a, bool json, const Status& s, int rc) {
  Say(s.ToString());
  if (json) std::printf("%s\n", ErrorDoc(s).dump(2).c_str());
  if (!a.json_out.empty()) WriteJsonOut(a.json_out, ErrorDoc(s));
  return rc;
}

int Main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  Args a;
  Status s = ParseArgs(words, &a);
  // --json asks for an error object even if the parse stopped before reaching it.
  bool json = a.json;
  for (const std::string& w : words) json = json || w == "--json";
  if (!s.ok()) return Fail(a, json, s, 2);
  if (a.help) {
    std::fputs(a.help_text.c_str(), stdout);
    return 0;
  }
  auto target = PrepareTarget(a.path, a.file, a.op != "read", a.op != "write", a.base.file_size);
  if (!target.ok()) return Fail(a, json, target.status(), 2);
  const Target& t = *target;
  if (t.own_file) {
    std::snprintf(g_cleanup_path, sizeof g_cleanup_path, "%s", t.file.c_str());
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
  }
  std::vector<Row> rows;
  RunState st;
  Status run;
  {
    Progress progress(a.quiet);
    run = RunAll(t, Points(a, t.file), progress, &st, &rows);
  }
  if (t.own_file) unlink(t.file.c_str());
  if (!run.ok()) return Fail(a, json, run, 1);

  const nlohmann::json doc = ResultDoc(a, rows, st);
  int rc = 0;
  if (a.json) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    PrintTable(rows);
  }
  if (!a.json_out.empty()) {
    if (!WriteJsonOut(a.json_out, doc)) {
      rc = 1;
    } else if (!a.json) {
      std::printf("wrote %s\n", a.json_out.c_str());
    }
  }
  if (a.emit_config && !a.json && !rows.empty()) {
    auto best = BestConfig(rows);
    std::printf("# best measured (read %.2f GB/s, write %.2f GB/s); paste into your config:\n",
                best["measured"]["read_gbps"].get<double>(),
                best["measured"]["write_gbps"].get<double>());
    best.erase("measured");
    std::printf("%s\n", best.dump(2).c_str());
  }
  return rc;
}

}  // namespace
}  // namespace strata::aio_bench

int main(int argc, char** argv) { return strata::aio_bench::Main(argc, argv); }
