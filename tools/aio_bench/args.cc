#include "tools/aio_bench/args.h"

#include <string>
#include <string_view>
#include <vector>

#include "core/flags.h"

namespace strata::aio_bench {
namespace {

constexpr char kIntro[] =
    "Tunes a disk for Strata: streams a file with O_DIRECT through an AioHandle for one point or\n"
    "a sweep of engine x block size x queue depth x threads x {write, read}, verifies what it\n"
    "reads, prints a table (GB/s, IOPS, latency p50/p99) or JSON, and with --emit-config the best\n"
    "`aio` section. With --path, reads run on a file laid out first (written and synced, not\n"
    "timed), as fio does. Sweeps default to --file-size 512M.\n";

}  // namespace

Status ParseArgs(const std::vector<std::string>& words_in, Args* a) {
  // "--sweep" alone (at the end or before another flag) keeps meaning "--sweep full".
  std::vector<std::string> words;
  for (size_t i = 0; i < words_in.size(); ++i) {
    words.push_back(words_in[i]);
    if (words_in[i] == "--sweep" &&
        (i + 1 == words_in.size() || words_in[i + 1].rfind("-", 0) == 0)) {
      words.push_back("full");
    }
  }

  PointSpec& b = a->base;
  b.aio.engine = IoEngineKind::kIoUring;
  std::string engine = "io_uring", buffers = b.huge_pages ? "huge" : "small";
  int64_t queue_depth = b.aio.queue_depth, threads = b.aio.thread_count;
  uint64_t block_size = b.aio.block_size;
  bool reg = b.register_buffers, fixed = b.aio.fixed_files, overlap = b.aio.overlap_events;

  FlagParser p("aio_bench (--path DIR | --file FILE) [options]");
  auto str = [](std::string* out) {
    return [out](std::string_view v) {
      *out = std::string(v);
      return Status::Ok();
    };
  };
  p.Custom("path", "DIR", str(&a->path),
           "directory to benchmark (a scratch file is laid out there and removed)");
  p.Custom("file", "FILE", str(&a->file),
           "use this file instead (kept); reading a file aio_bench did not write is not verified");
  p.Choice("op", &a->op, {"read", "write", "both"}, "both: write, then read it back and verify");
  p.Bytes("block-size", &block_size, "piece size");
  p.Int("queue-depth", &queue_depth, "pieces in flight per thread", 1, 1024);
  p.Int("threads", &threads, "intra_op_parallelism", 1, 64);
  p.Choice("engine", &engine, {"io_uring", "libaio", "auto"}, "I/O engine");
  p.Bytes("file-size", &b.file_size, "bytes per point, 512 MiB in sweeps unless given");
  p.Bytes("request-size", &b.request_size, "bytes per request, two in flight");
  p.Choice("sweep", &a->sweep, {"quick", "full"},
           "sweep engines x block sizes x queue depths x threads (alone: full)");
  p.Bool("json", &a->json, "print JSON on stdout (one object for one point) instead of the table");
  p.Custom("json-out", "FILE", str(&a->json_out), "also write the JSON document to FILE");
  p.Bool("emit-config", &a->emit_config, "print the best configuration as a config snippet");
  p.Choice("buffers", &buffers, {"huge", "small"}, "transparent huge pages or 4 KiB pages");
  p.Bool("register", &reg, "register buffers with io_uring (--no-register: do not)");
  p.Bool("fixed-files", &fixed, "register files with io_uring (--no-fixed-files: do not)");
  p.Bool("sqpoll", &b.aio.sqpoll, "io_uring kernel submission thread (costs a whole core)");
  p.Bool("single-submit", &b.aio.single_submit, "submit pieces one at a time");
  p.Bool("overlap", &overlap, "keep the queue full (--no-overlap: lock-step batches)");
  p.Bool("allow-buffered", &b.aio.allow_buffered,
         "accept a filesystem without O_DIRECT (measures the page cache)");
  p.Bool("verify", &b.verify, "verify the data read (--no-verify: do not)");
  p.Bool("quiet", &a->quiet, "no progress output");

  std::vector<std::string> positional;
  STRATA_RETURN_IF_ERROR(p.Parse(words, &positional));
  if (p.help_requested()) {
    a->help = true;
    a->help_text = p.Help() + "\n" + kIntro;
    return Status::Ok();
  }
  if (!positional.empty()) {
    return InvalidArgumentError("unexpected argument '" + positional.front() +
                                "' (flags are --name VALUE; see --help)");
  }
  if (a->path.empty() == a->file.empty()) {
    return InvalidArgumentError("give exactly one of --path DIR or --file FILE (see --help)");
  }
  if (block_size == 0 || block_size % 4096 != 0) {
    return InvalidArgumentError("--block-size " + std::to_string(block_size) +
                                ": must be a non-zero multiple of 4096");
  }
  if (b.file_size == 0 || b.request_size == 0) {
    return InvalidArgumentError("--file-size and --request-size must be non-zero");
  }
  STRATA_ASSIGN_OR_RETURN(b.aio.engine, ParseIoEngineKind(engine));
  b.aio.block_size = block_size;
  b.aio.queue_depth = static_cast<int>(queue_depth);
  b.aio.thread_count = static_cast<int>(threads);
  b.aio.fixed_files = fixed;
  b.aio.overlap_events = overlap;
  b.register_buffers = reg;
  b.huge_pages = buffers == "huge";
  if (!a->sweep.empty() && !p.WasSet("file-size")) b.file_size = 512ull << 20;
  return Status::Ok();
}

}  // namespace strata::aio_bench
