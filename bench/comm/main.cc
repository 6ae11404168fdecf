// comm_bench: what engine/comm's mpi backend costs over plain OpenMPI, measured in the same run.
//
//   strata launch --num_procs 2 -- comm_bench [--min_size 64K] [--max_size 64M] [--rounds 5]
//                                             [--json]
//
// For each size (x4 steps), all-reduce (sum, fp32) and all-gather: an osu-style loop of blocking
// MPI_Allreduce / MPI_Allgather calls (the reference), a loop of the calls the backend itself
// makes (MPI_Iallreduce / MPI_Iallgather, MPI_Test + sched_yield until done: "plain-nb", which
// isolates the wrapper's own cost), and the same collectives through
// Communicator (enqueued on a HostDevice stream, each waited for: the conservative use), on the
// same buffers, alternating A B B A per round; medians of per-op time, slowest rank. Prints
// bandwidth (algorithm GB/s: bytes of the full buffer / time) and the ratio wrapper time / plain
// time (1.05 = the wrapper costs 5%). The summary ratio is the geometric mean over sizes >= 1 MiB.
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/units.h"
#include "engine/comm/registry.h"
#include "offload/device/host/host_device.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "comm_bench: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}
void Check(const Status& s, const char* what) {
  if (!s.ok()) Die(std::string(what) + ": " + s.ToString());
}

double SlowestRank(double seconds) {
  double out = 0;
  MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double TimePerOp(int iters, F&& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  return SlowestRank(std::chrono::duration<double>(Clock::now() - t0).count()) / iters;
}

int Main(int argc, char** argv) {
  uint64_t min_size = 64 << 10, max_size = 64 << 20;
  int64_t rounds = 5;
  bool json = false;
  FlagParser flags("comm_bench [--min_size B] [--max_size B] [--rounds R] [--json]");
  flags.Bytes("min_size", &min_size, "smallest buffer (bytes)");
  flags.Bytes("max_size", &max_size, "largest buffer (bytes)");
  flags.Int("rounds", &rounds, "ABBA rounds per size", 1, 1000);
  flags.Bool("json", &json, "print JSON instead of a table");
  std::vector<std::string> rest;
  if (Status s = flags.Parse(argc, argv, 1, &rest); !s.ok()) Die(s.message());
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  HostDeviceOptions dev;
  dev.memory_bytes = 3 * max_size + (size_t{16} << 20);
  auto device = CreateHostDevice(dev);
  Check(device.status(), "device");
  Stream stream = *(*device)->CreateStream();
  CommOptions options;
  options.backend = CommBackend::kMpi;
  options.check_sizes = false;
  options.log_choice = rank == 0 && !json;
  auto comm = CreateCommunicator(options);
  Check(comm.status(), "communicator");
  MPI_Comm plain;
  MPI_Comm_dup(MPI_COMM_WORLD, &plain);

  auto* send = static_cast<float*>(*(*device)->Allocate(max_size));
  auto* recv = static_cast<float*>(*(*device)->Allocate(max_size));
  std::fill(send, send + max_size / 4, 1.0f);

  struct Row {
    const char* op;
    size_t bytes;
    double plain_s, nb_s, comm_s;
  };
  std::vector<Row> rows;
  for (const char* op : {"all_reduce", "all_gather"}) {
    const bool ar = std::string(op) == "all_reduce";
    for (size_t bytes = min_size; bytes <= max_size; bytes *= 4) {
      const size_t n = bytes / 4, shard = n / static_cast<size_t>(world);
      const int iters = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 5, 200));
      auto plain_op = [&] {
        if (ar) {
          MPI_Allreduce(send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM, plain);
        } else {
          MPI_Allgather(send, static_cast<int>(shard), MPI_FLOAT, recv, static_cast<int>(shard),
                        MPI_FLOAT, plain);
        }
      };
      // The same calls the backend makes, without it: MPI_I* then MPI_Test with a yield.
      auto nb_op = [&] {
        MPI_Request req;
        if (ar) {
          MPI_Iallreduce(send, recv, static_cast<int>(n), MPI_FLOAT, MPI_SUM, plain, &req);
        } else {
          MPI_Iallgather(send, static_cast<int>(shard), MPI_FLOAT, recv, static_cast<int>(shard),
                         MPI_FLOAT, plain, &req);
        }
        for (int done = 0; MPI_Test(&req, &done, MPI_STATUS_IGNORE), !done;) sched_yield();
      };
      auto comm_op = [&] {
        Check(
            ar ? (*comm)->AllReduce(stream, send, recv, n, DType::kFloat32, ReduceOp::kSum, nullptr)
               : (*comm)->AllGather(stream, send, recv, shard * static_cast<size_t>(world),
                                    DType::kFloat32, nullptr),
            op);
        Check(stream.Synchronize(), op);
      };
      plain_op();  // warm-up (connections, registration)
      nb_op();
      comm_op();
      std::vector<double> a, nb, b;
      for (int r = 0; r < rounds; ++r) {
        a.push_back(TimePerOp(iters, plain_op));
        nb.push_back(TimePerOp(iters, nb_op));
        b.push_back(TimePerOp(iters, comm_op));
        b.push_back(TimePerOp(iters, comm_op));
        nb.push_back(TimePerOp(iters, nb_op));
        a.push_back(TimePerOp(iters, plain_op));
      }
      rows.push_back({op, bytes, Median(a), Median(nb), Median(b)});
    }
  }
  double log_sum = 0, log_sum_nb = 0;
  int count = 0;
  for (const Row& r : rows) {
    if (r.bytes < (size_t{1} << 20)) continue;
    log_sum += std::log(r.comm_s / r.plain_s);
    log_sum_nb += std::log(r.comm_s / r.nb_s);
    ++count;
  }
  const double ratio = count > 0 ? std::exp(log_sum / count) : 0;
  const double ratio_nb = count > 0 ? std::exp(log_sum_nb / count) : 0;
  if (rank == 0) {
    if (json) {
      std::printf(
          "{\"world\": %d, \"ratio_wrapper_over_plain\": %.4f, "
          "\"ratio_wrapper_over_plain_nonblocking\": %.4f, \"rows\": [",
          world, ratio, ratio_nb);
      for (size_t i = 0; i < rows.size(); ++i) {
        const Row& r = rows[i];
        std::printf(
            "%s{\"op\": \"%s\", \"bytes\": %zu, \"plain_gbps\": %.3f, "
            "\"plain_nonblocking_gbps\": %.3f, \"comm_gbps\": %.3f, \"ratio\": %.4f, "
            "\"ratio_nonblocking\": %.4f}",
            i ? ", " : "", r.op, r.bytes, r.bytes / r.plain_s / 1e9, r.bytes / r.nb_s / 1e9,
            r.bytes / r.comm_s / 1e9, r.comm_s / r.plain_s, r.comm_s / r.nb_s);
      }
      std::printf("]}\n");
    } else {
      std::printf("world %d, fp32, medians of %d ABBA rounds (GB/s = buffer bytes / time)\n", world,
                  static_cast<int>(rounds));
      std::printf("%-11s %10s %11s %11s %11s %8s %8s\n", "op", "size", "plain GB/s", "plain-nb",
                  "comm GB/s", "ratio", "ratio-nb");
      for (const Row& r : rows) {
        std::printf("%-11s %10s %11.3f %11.3f %11.3f %8.3f %8.3f\n", r.op,
                    FormatBytes(r.bytes).c_str(), r.bytes / r.plain_s / 1e9, r.bytes / r.nb_s / 1e9,
                    r.bytes / r.comm_s / 1e9, r.comm_s / r.plain_s, r.comm_s / r.nb_s);
      }
      std::printf(
          "wrapper time / plain time, geometric mean over sizes >= 1 MiB: %.3f (vs "
          "blocking calls), %.3f (vs MPI_I* + MPI_Test loop)\n",
          ratio, ratio_nb);
    }
  }
  comm->reset();
  MPI_Comm_free(&plain);
  (void)(*device)->DestroyStream(stream);
  device->reset();
  MPI_Finalize();
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
