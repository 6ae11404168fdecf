// bench/optimizer_swap: one Adam step with fp32 master + m + v on NVMe (default 2B elements,
// ~24 GB), pipelined (read(i+1) || update(i) || write(i-1)) and serial, in ABBA order, against
// the lower bound measured in the same run:
//   max(bytes read / fio read GB/s + bytes written / fio write GB/s, Adam time in memory)
// where fio runs on the same directory (O_DIRECT, 1 MiB, qd 32, its default buffers) and Adam's
// in-memory time is measured on a slice that fits and scaled. Also the cost of checksums
// (pipelined step with and without, on a slice). Target (issue 5): pipelined <= 1.15 x bound.
// Gradients are bf16 and the fused bf16 copy-out is on (mixed precision); one sub-group-sized
// gradient buffer and copy-out buffer are reused for every sub-group (the traffic is the same).
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "aio/direct/aligned_buffer.h"
#include "core/flags.h"
#include "core/units.h"
#include "swap/optimizer_swapper.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int64_t elements = 2'000'000'000;
  int64_t sub_group = 50'000'000;
  std::string path = ".";
  uint64_t block = 4 << 20;
  int64_t queue_depth = 16;
  int64_t buffers = 4;
  int64_t update_threads = 0;
  bool json = false;
};

// Exits 0 after --help, 2 with one line on a bad flag.
Args ParseArgs(int argc, char** argv) {
  Args a;
  FlagParser flags("optimizer_swap [options]");
  flags.Int("elements", &a.elements, "optimizer state elements (12 B each on NVMe)", 1);
  flags.Int("sub-group", &a.sub_group, "sub_group_size (elements)", 1);
  flags.String("path", &a.path, "directory on the NVMe drive to measure");
  flags.Int("buffers", &a.buffers, "offload_optimizer.buffer_count", 1, 64);
  flags.Bytes("block-size", &a.block, "aio block_size");
  flags.Int("queue-depth", &a.queue_depth, "aio queue_depth", 1, 1024);
  flags.Int("update-threads", &a.update_threads,
            "threads of the pipelined update (0: all cores but one, -1: the optimizer's)", -1,
            1024);
  flags.Bool("json", &a.json, "print the figures as JSON");
  std::vector<std::string> positional;
  Status s = flags.Parse(argc, argv, 1, &positional);
  if (s.ok() && !positional.empty()) {
    s = InvalidArgumentError("unexpected argument '" + positional[0] + "'");
  }
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    std::exit(0);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "optimizer_swap: %s\n%s\n", s.message().c_str(), flags.Help().c_str());
    std::exit(2);
  }
  return a;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "optimizer_swap: %s\n", s.ToString().c_str());
  return 1;
}

Result<double> FioGbps(const std::string& dir, const std::string& op) {
  const std::string file = dir + "/optimizer_swap_fio." + std::to_string(getpid()) + ".dat";
  std::string cmd = "fio --name=strata --filename=" + file + " --rw=" + op +
                    " --bs=1M --iodepth=32 --direct=1 --ioengine=io_uring --size=4G "
                    "--output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return IoError("cannot run fio");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  if (op == "read") std::filesystem::remove(file);
  if (rc != 0) return UnavailableError("fio failed (is it installed? apt-get install fio)");
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return InternalError("fio printed no JSON");
  return j["jobs"][0][op]["bw_bytes"].get<double>() / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Bench {
  Args a;
  std::unique_ptr<AioHandle> aio;
  CpuOptimizer opt;
  AlignedBuffer grads, copy;  // bf16, one sub-group
};

// Creates a swapper over `elements` and writes the initial state.
Result<std::unique_ptr<OptimizerSwapper>> MakeSwapper(Bench& b, uint64_t elements, bool pipelined,
                                                      bool checksums, const std::string& dir,
                                                      const std::vector<float>& init) {
  OptimizerSwapperOptions o;
  o.nvme_paths = {dir};
  o.pipeline_read = o.pipeline_write = pipelined;
  o.buffer_count = static_cast<size_t>(b.a.buffers);
  o.checksums = checksums;
  o.update_threads = static_cast<int>(b.a.update_threads);
  STRATA_ASSIGN_OR_RETURN(auto sw, OptimizerSwapper::Create(o, b.aio.get(), &b.opt));
  for (uint64_t done = 0; done < elements; done += b.a.sub_group) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(b.a.sub_group, elements - done));
    STRATA_ASSIGN_OR_RETURN(int sg, sw->AddSubGroup(n, 0));
    STRATA_RETURN_IF_ERROR(sw->Initialize(sg, init.data()));
  }
  return sw;
}

Result<double> StepMs(Bench& b, OptimizerSwapper& sw, bool pipelined) {
  // The same swap files serve both schedules: only the pipelining flags differ.
  (void)pipelined;
  auto io = [&](int) {
    SubGroupIo s;
    s.grads = b.grads.data();
    s.grad_dtype = DType::kBFloat16;
    s.param_copy = b.copy.data();
    s.param_copy_dtype = DType::kBFloat16;
    return s;
  };
  auto t = Clock::now();
  STRATA_RETURN_IF_ERROR(sw.Step(io));
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int Run(const Args& args) {
  struct statvfs vfs;
  if (statvfs(args.path.c_str(), &vfs) != 0 || access(args.path.c_str(), W_OK) != 0) {
    return Fail(InvalidArgumentError(args.path + " is not a writable directory"));
  }
  const uint64_t need = static_cast<uint64_t>(args.elements) * 12 + (5ull << 30);
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < need) {
    return Fail(InvalidArgumentError(
        args.path + " has " + FormatBytes(free_bytes) + " free; " + std::to_string(args.elements) +
        " elements need " + FormatBytes(need) +
        " (12 B/element of state + 4 GiB for fio + margin); lower --elements"));
  }
  Bench b{args, nullptr, std::move(CpuOptimizer::Create(OptimizerKind::kAdam)).value(), {}, {}};
  Hyperparams hp = DefaultHyperparams(OptimizerKind::kAdam);
  hp.weight_decay = 0.01f;
  if (!b.opt.AddGroup(hp).ok()) return Fail(InternalError("AddGroup"));
  AioOptions ao;
  ao.block_size = static_cast<size_t>(args.block);
  ao.queue_depth = static_cast<int>(args.queue_depth);
  auto aio = AioHandle::Create(ao);
  if (!aio.ok()) return Fail(aio.status());
  b.aio = std::move(aio).value();
  const size_t sg = static_cast<size_t>(std::min(args.sub_group, args.elements));
  auto g = AlignedBuffer::Allocate(sg * 2), c = AlignedBuffer::Allocate(sg * 2);
  if (!g.ok() || !c.ok()) return Fail(OutOfMemoryError("cpu: gradient buffers"));
  b.grads = std::move(g).value();
  b.copy = std::move(c).value();
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> init(sg);
  for (auto& x : init) x = nd(rng);
  auto* g16 = static_cast<uint16_t*>(b.grads.data());
  for (size_t i = 0; i < sg; ++i) g16[i] = static_cast<uint16_t>(0x3C00 + (rng() & 0x3FF));

  const std::string dir = args.path + "/optimizer_swap." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto cleanup = [&] { std::filesystem::remove_all(dir); };
  auto say = [&](const std::string& m) {
    if (!args.json) std::fprintf(stderr, "optimizer_swap: %s\n", m.c_str());
  };

  say("fio reference (4 GiB, 1 MiB, qd 32)...");
  auto fw1 = FioGbps(dir, "write");
  auto fr1 = FioGbps(dir, "read");
  if (!fw1.ok() || !fr1.ok()) {
    cleanup();
    return Fail(!fw1.ok() ? fw1.status() : fr1.status());
  }

  // Adam in memory on a slice, same dtypes, scaled to the full size.
  say("Adam in memory on a slice...");
  const size_t slice = static_cast<size_t>(std::min<uint64_t>(args.elements, 100'000'000));
  double adam_ms = 0;
  {
    std::vector<float> p(slice), m(slice, 0.f), v(slice, 0.f);
    for (size_t i = 0; i < slice; ++i) p[i] = init[i % sg];
    std::vector<uint16_t> gs(slice), cp(slice);
    for (size_t i = 0; i < slice; ++i) gs[i] = g16[i % sg];
    StepTensors t{slice,    p.data(), gs.data(), DType::kBFloat16,
                  m.data(), v.data(), cp.data(), DType::kBFloat16};
    std::vector<double> times;
    for (int r = 0; r < 3; ++r) {
      auto t0 = Clock::now();
      if (!b.opt.StepAt(hp, r + 1, t).ok()) return Fail(InternalError("StepAt"));
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    adam_ms = Median(times) * static_cast<double>(args.elements) / static_cast<double>(slice);
  }

  say("writing the initial state (" + FormatBytes(args.elements * 12) + ")...");
  auto sw = MakeSwapper(b, args.elements, true, false, dir, init);
  if (!sw.ok()) {
    cleanup();
    return Fail(sw.status());
  }
  // Two swappers cannot share the files, so one swapper switches schedule between steps.
  std::vector<double> pipe, serial, serial_io;
  for (int k = 0; k < 2; ++k) {
    for (bool pipelined :
         (k == 0 ? std::vector<bool>{false, true} : std::vector<bool>{true, false})) {
      (*sw)->set_pipelining(pipelined, pipelined);
      say(std::string(pipelined ? "pipelined" : "serial") + " step...");
      auto ms = StepMs(b, **sw, pipelined);
      if (!ms.ok()) {
        cleanup();
        return Fail(ms.status());
      }
      (pipelined ? pipe : serial).push_back(*ms);
      if (!pipelined) {
        serial_io.push_back((*sw)->last_step().read_wait_ms + (*sw)->last_step().write_wait_ms);
      }
    }
  }
  const auto& st = (*sw)->last_step();
  const double bytes_read = static_cast<double>(st.bytes_read);
  const double bytes_written = static_cast<double>(st.bytes_written);
  sw->reset();

  // Checksum cost on a slice: pipelined step without and with checksums (ABBA).
  say("checksum cost on a slice...");
  const uint64_t cs_elems = static_cast<uint64_t>(std::min(args.elements, 8 * args.sub_group));
  std::vector<double> plain_ms, sum_ms;
  for (int k = 0; k < 2; ++k) {
    for (bool sums : (k == 0 ? std::vector<bool>{false, true} : std::vector<bool>{true, false})) {
      auto s2 = MakeSwapper(b, cs_elems, true, sums, dir, init);
      if (!s2.ok()) {
        cleanup();
        return Fail(s2.status());
      }
      auto ms = StepMs(b, **s2, true);
      if (!ms.ok()) {
        cleanup();
        return Fail(ms.status());
      }
      (sums ? sum_ms : plain_ms).push_back(*ms);
    }
  }

  say("fio reference again...");
  auto fw2 = FioGbps(dir, "write");
  auto fr2 = FioGbps(dir, "read");
  cleanup();
  const double fio_w = fw2.ok() ? (*fw1 + *fw2) / 2 : *fw1;
  const double fio_r = fr2.ok() ? (*fr1 + *fr2) / 2 : *fr1;
  const double io_ms = (bytes_read / (fio_r * 1e9) + bytes_written / (fio_w * 1e9)) * 1e3;
  const double bound_ms = std::max(io_ms, adam_ms);
  const double pipe_ms = Median(pipe), serial_ms = Median(serial);
  const double cs_ratio = Median(sum_ms) / Median(plain_ms);
  // A stricter yardstick than fio: Strata's own I/O time for the same bytes, i.e. the time the
  // serial schedule spent waiting on reads and writes (nothing else ran then).
  const double own_io_ms = Median(serial_io);
  const double own_bound_ms = std::max(own_io_ms, adam_ms);
  nlohmann::json j = {
      {"elements", args.elements},
      {"sub_group_size", args.sub_group},
      {"buffer_count", args.buffers},
      {"bytes_read", bytes_read},
      {"bytes_written", bytes_written},
      {"fio_read_gbps", fio_r},
      {"fio_write_gbps", fio_w},
      {"io_bound_ms", io_ms},
      {"adam_in_memory_ms", adam_ms},
      {"lower_bound_ms", bound_ms},
      {"pipelined_ms", pipe_ms},
      {"serial_ms", serial_ms},
      {"pipelined_runs_ms", pipe},
      {"serial_runs_ms", serial},
      {"pipelined_over_bound", pipe_ms / bound_ms},
      {"own_io_ms", own_io_ms},
      {"pipelined_over_own_bound", pipe_ms / own_bound_ms},
      {"update_threads", args.update_threads},
      {"serial_over_pipelined", serial_ms / pipe_ms},
      {"checksum_slice_elements", cs_elems},
      {"checksum_step_ratio", cs_ratio},
      {"achieved_read_plus_write_gbps", (bytes_read + bytes_written) / pipe_ms / 1e6}};
  if (args.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("optimizer state on NVMe: %s elements, %s read + %s written per step\n",
              std::to_string(args.elements).c_str(),
              FormatBytes(static_cast<uint64_t>(bytes_read)).c_str(),
              FormatBytes(static_cast<uint64_t>(bytes_written)).c_str());
  std::printf("fio: read %.2f GB/s, write %.2f GB/s -> I/O bound %.0f ms\n", fio_r, fio_w, io_ms);
  std::printf("Adam in memory (scaled from %zu elements): %.0f ms\n", slice, adam_ms);
  std::printf("lower bound %.0f ms\n", bound_ms);
  std::printf("pipelined step %.0f ms  -> %.2f x bound (target <= 1.15)\n", pipe_ms,
              pipe_ms / bound_ms);
  std::printf("serial step    %.0f ms  -> %.2f x pipelined\n", serial_ms, serial_ms / pipe_ms);
  std::printf(
      "stricter: Strata's own I/O time for these bytes (serial waits) %.0f ms -> "
      "pipelined %.2f x max(own I/O, Adam)\n",
      own_io_ms, pipe_ms / own_bound_ms);
  std::printf("checksums on (xxh3 per 1 MiB, %s elements): step x %.3f\n",
              std::to_string(cs_elems).c_str(), cs_ratio);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Run(strata::ParseArgs(argc, argv)); }
