// aio_bench: tune a disk for Strata before training. Sweeps block size x queue depth x threads x
// engine x {read, write} with O_DIRECT on a given directory, verifies the data, prints a table
// (GB/s, IOPS, latency p50/p99), writes JSON, and with --emit-config prints the best `aio`
// section ready to paste into a config. Run with --help for the flags.
#include <sys/statvfs.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "aio/io_engine.h"
#include "core/units.h"
#include "tools/aio_bench/bench_runner.h"
#include "tools/aio_bench/report.h"

namespace strata::aio_bench {
namespace {

char g_cleanup_path[4096];

void OnSignal(int sig) {
  if (g_cleanup_path[0] != 0) unlink(g_cleanup_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

const char kUsage[] = R"(usage: aio_bench (--path DIR | --file FILE) [options]
  --path DIR           directory to benchmark (a scratch file is created and removed)
  --file FILE          use this file instead (kept); reads need it to hold --file-size bytes
  --op read|write|both default both (write first, then read it back and verify)
  --block-size SIZE    piece size, e.g. 1M (default 1M)
  --queue-depth N      pieces in flight per thread (default 8)
  --threads N          intra_op_parallelism (default 1)
  --engine E           io_uring | libaio | auto (default io_uring)
  --file-size SIZE     bytes per point (default 1G; sweeps: 512M)
  --request-size SIZE  bytes per request, two in flight (default 64M)
  --sweep [quick|full] sweep engines x block sizes x queue depths x threads
  --json               print JSON on stdout (one object for one point) instead of the table
  --json-out FILE      also write the JSON document to FILE
  --emit-config        print the best configuration as a config snippet
  --buffers huge|small transparent huge pages (default) or 4 KiB pages
  --no-register        do not register buffers with io_uring
  --no-fixed-files     do not register files with io_uring
  --sqpoll             io_uring kernel submission thread (costs a whole core)
  --single-submit      submit pieces one at a time
  --no-overlap         lock-step batches instead of keeping the queue full
  --allow-buffered     accept a filesystem without O_DIRECT (measures the page cache)
  --no-verify          skip data verification on reads
  --quiet              no progress bar
)";

struct Args {
  std::string path, file, op = "both", json_out, sweep;
  PointSpec base;
  bool json = false, emit = false, quiet = false, file_size_set = false;
};

Status ParseArgs(int argc, char** argv, Args* a) {
  a->base.aio.engine = IoEngineKind::kIoUring;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto need = [&](std::string* out) -> Status {
      if (i + 1 >= argc) return InvalidArgumentError(k + " needs a value");
      *out = argv[++i];
      return Status::Ok();
    };
    auto size = [&](uint64_t* out) -> Status {
      std::string v;
      STRATA_RETURN_IF_ERROR(need(&v));
      auto r = ParseByteSize(v);
      if (!r.ok()) return r.status().WithContext(k);
      *out = *r;
      return Status::Ok();
    };
    auto integer = [&](int* out, int lo, int hi) -> Status {
      std::string v;
      STRATA_RETURN_IF_ERROR(need(&v));
      char* end = nullptr;
      long x = std::strtol(v.c_str(), &end, 10);
      if (*end != 0 || x < lo || x > hi) {
        return InvalidArgumentError(k + " " + v + ": expected an integer in [" +
                                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      *out = static_cast<int>(x);
      return Status::Ok();
    };
    uint64_t u = 0;
    std::string v;
    if (k == "--path") {
      STRATA_RETURN_IF_ERROR(need(&a->path));
    } else if (k == "--file") {
      STRATA_RETURN_IF_ERROR(need(&a->file));
    } else if (k == "--op") {
      STRATA_RETURN_IF_ERROR(need(&a->op));
      if (a->op != "read" && a->op != "write" && a->op != "both") {
        return InvalidArgumentError("--op " + a->op + ": allowed read, write, both");
      }
    } else if (k == "--block-size") {
      STRATA_RETURN_IF_ERROR(size(&u));
      a->base.aio.block_size = u;
    } else if (k == "--queue-depth") {
      STRATA_RETURN_IF_ERROR(integer(&a->base.aio.queue_depth, 1, 1024));
    } else if (k == "--threads") {
      STRATA_RETURN_IF_ERROR(integer(&a->base.aio.thread_count, 1, 64));
    } else if (k == "--engine") {
      STRATA_RETURN_IF_ERROR(need(&v));
      STRATA_ASSIGN_OR_RETURN(a->base.aio.engine, ParseIoEngineKind(v));
    } else if (k == "--file-size") {
      STRATA_RETURN_IF_ERROR(size(&a->base.file_size));
      a->file_size_set = true;
    } else if (k == "--request-size") {
      STRATA_RETURN_IF_ERROR(size(&a->base.request_size));
    } else if (k == "--sweep") {
      a->sweep = "full";
      if (i + 1 < argc && argv[i + 1][0] != '-') a->sweep = argv[++i];
      if (a->sweep != "quick" && a->sweep != "full") {
        return InvalidArgumentError("--sweep " + a->sweep + ": allowed quick, full");
      }
    } else if (k == "--json") {
      a->json = true;
    } else if (k == "--json-out") {
      STRATA_RETURN_IF_ERROR(need(&a->json_out));
    } else if (k == "--emit-config") {
      a->emit = true;
    } else if (k == "--buffers") {
      STRATA_RETURN_IF_ERROR(need(&v));
      if (v != "huge" && v != "small") return InvalidArgumentError("--buffers: huge or small");
      a->base.huge_pages = v == "huge";
    } else if (k == "--no-register") {
      a->base.register_buffers = false;
    } else if (k == "--no-fixed-files") {
      a->base.aio.fixed_files = false;
    } else if (k == "--sqpoll") {
      a->base.aio.sqpoll = true;
    } else if (k == "--single-submit") {
      a->base.aio.single_submit = true;
    } else if (k == "--no-overlap") {
      a->base.aio.overlap_events = false;
    } else if (k == "--allow-buffered") {
      a->base.aio.allow_buffered = true;
    } else if (k == "--no-verify") {
      a->base.verify = false;
    } else if (k == "--quiet") {
      a->quiet = true;
    } else if (k == "--help" || k == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else {
      return InvalidArgumentError("unknown flag '" + k + "' (see --help)");
    }
  }
  if (a->path.empty() == a->file.empty()) {
    return InvalidArgumentError("give exactly one of --path DIR or --file FILE (see --help)");
  }
  if (!a->sweep.empty() && !a->file_size_set) a->base.file_size = 512ull << 20;
  return Status::Ok();
}

Status CheckTarget(Args* a) {
  std::string dir = a->path;
  if (!a->file.empty()) {
    auto slash = a->file.rfind('/');
    dir = slash == std::string::npos ? "." : a->file.substr(0, slash == 0 ? 1 : slash);
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return ErrnoToStatus(errno, "'" + dir + "' is not a writable directory")
        .WithContext("aio_bench");
  }
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) == 0) {
    uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (a->file.empty() && free_bytes < a->base.file_size + (64 << 20)) {
      return InvalidArgumentError("aio_bench: " + dir + " has " + FormatBytes(free_bytes) +
                                  " free, a point needs " + FormatBytes(a->base.file_size) +
                                  " (lower --file-size)");
    }
  }
  if (a->file.empty()) {
    a->file = a->path + "/aio_bench." + std::to_string(getpid()) + ".dat";
    std::snprintf(g_cleanup_path, sizeof g_cleanup_path, "%s", a->file.c_str());
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
  }
  return Status::Ok();
}

std::vector<PointSpec> Points(const Args& a) {
  std::vector<PointSpec> pts;
  std::vector<IoOp> ops;
  if (a.op != "read") ops.push_back(IoOp::kWrite);
  if (a.op != "write") ops.push_back(IoOp::kRead);
  auto add = [&](PointSpec s) {
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

int Main(int argc, char** argv) {
  Args a;
  Status s = ParseArgs(argc, argv, &a);
  if (s.ok()) s = CheckTarget(&a);
  if (!s.ok()) {
    std::fprintf(stderr, "aio_bench: %s\n", s.message().c_str());
    return 2;
  }
  const bool own_file = !a.path.empty();
  auto points = Points(a);
  const bool bar = !a.quiet && isatty(2);
  std::vector<Row> rows;
  int rc = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    PointSpec spec = points[i];
    spec.file = a.file;
    if (!a.quiet && !bar) {
      std::fprintf(stderr, "aio_bench: point %zu/%zu: %s %s bs=%s qd=%d threads=%d\n", i + 1,
                   points.size(), std::string(IoEngineKindName(spec.aio.engine)).c_str(),
                   spec.op == IoOp::kRead ? "read" : "write",
                   FormatBytes(spec.aio.block_size).c_str(), spec.aio.queue_depth,
                   spec.aio.thread_count);
    }
    auto progress = [&](uint64_t done) {
      if (!bar) return;
      int pct = static_cast<int>(100.0 * static_cast<double>(done) / spec.file_size);
      int fill = pct / 5;
      std::fprintf(stderr, "\r[%-20.*s] %3d%%  point %zu/%zu", fill, "####################", pct,
                   i + 1, points.size());
    };
    auto r = RunPoint(spec, progress);
    if (!r.ok()) {
      std::fprintf(stderr, "%saio_bench: %s\n", bar ? "\n" : "", r.status().ToString().c_str());
      rc = 1;
      break;
    }
    rows.push_back({spec, *r});
  }
  if (bar) std::fprintf(stderr, "\r%60s\r", "");
  if (own_file) unlink(a.file.c_str());
  nlohmann::json doc;
  if (rows.size() == 1 && a.sweep.empty()) {
    doc = RowJson(rows.front());
  } else {
    doc["points"] = nlohmann::json::array();
    for (const Row& r : rows) doc["points"].push_back(RowJson(r));
    doc["best"] = BestConfig(rows);
  }
  if (a.json) {
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    PrintTable(rows);
  }
  if (!a.json_out.empty()) {
    std::ofstream out(a.json_out);
    out << doc.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "aio_bench: cannot write %s\n", a.json_out.c_str());
      rc = 1;
    } else if (!a.json) {
      std::printf("wrote %s\n", a.json_out.c_str());
    }
  }
  if (a.emit && !rows.empty()) {
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
