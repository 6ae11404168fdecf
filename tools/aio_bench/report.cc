#include "tools/aio_bench/report.h"

#include <cstdio>
#include <map>
#include <tuple>

#include "aio/aio_config.h"
#include "core/units.h"

namespace strata::aio_bench {
namespace {

const char* OpName(IoOp op) { return op == IoOp::kRead ? "read" : "write"; }

using Key = std::tuple<int, size_t, int, int, bool, bool>;
Key KeyOf(const PointSpec& s) {
  return {static_cast<int>(s.aio.engine),
          s.aio.block_size,
          s.aio.queue_depth,
          s.aio.thread_count,
          s.aio.single_submit,
          s.aio.overlap_events};
}

}  // namespace

void PrintTable(const std::vector<Row>& rows) {
  std::printf("%-9s %-5s %8s %4s %3s %9s %9s %10s %10s\n", "engine", "op", "block", "qd", "thr",
              "GB/s", "IOPS", "p50 us", "p99 us");
  for (const Row& r : rows) {
    std::printf("%-9s %-5s %8s %4d %3d %9.2f %9.0f %10.0f %10.0f\n",
                std::string(IoEngineKindName(r.spec.aio.engine)).c_str(), OpName(r.spec.op),
                FormatBytes(r.spec.aio.block_size).c_str(), r.spec.aio.queue_depth,
                r.spec.aio.thread_count, r.result.gbps, r.result.iops, r.result.lat_p50_us,
                r.result.lat_p99_us);
  }
  if (!rows.empty()) {
    std::printf("buffers: %s%s\n", rows.front().result.buffer.c_str(),
                rows.front().result.registered ? ", registered with io_uring" : "");
  }
}

nlohmann::json RowJson(const Row& r) {
  return nlohmann::json{{"engine", IoEngineKindName(r.spec.aio.engine)},
                        {"engine_detail", r.result.engine},
                        {"op", OpName(r.spec.op)},
                        {"block_size", r.spec.aio.block_size},
                        {"queue_depth", r.spec.aio.queue_depth},
                        {"threads", r.spec.aio.thread_count},
                        {"single_submit", r.spec.aio.single_submit},
                        {"overlap_events", r.spec.aio.overlap_events},
                        {"file_size", r.spec.file_size},
                        {"request_size", r.spec.request_size},
                        {"gbps", r.result.gbps},
                        {"iops", r.result.iops},
                        {"lat_p50_us", r.result.lat_p50_us},
                        {"lat_p99_us", r.result.lat_p99_us},
                        {"seconds", r.result.seconds},
                        {"buffer", r.result.buffer},
                        {"huge_pages", r.spec.huge_pages},
                        {"registered_buffers", r.result.registered},
                        {"verified", r.result.verified}};
}

nlohmann::json BestConfig(const std::vector<Row>& rows) {
  std::map<Key, std::pair<double, double>> by;  // read, write GB/s
  std::map<Key, const Row*> any;
  for (const Row& r : rows) {
    auto& p = by[KeyOf(r.spec)];
    (r.spec.op == IoOp::kRead ? p.first : p.second) = r.result.gbps;
    any[KeyOf(r.spec)] = &r;
  }
  const Row* best = nullptr;
  double best_score = -1, best_read = 0, best_write = 0;
  for (const auto& [k, p] : by) {
    double score = (p.first > 0 && p.second > 0) ? 2.0 / (1.0 / p.first + 1.0 / p.second)
                                                 : std::max(p.first, p.second);
    if (score > best_score) {
      best_score = score, best = any[k], best_read = p.first, best_write = p.second;
    }
  }
  if (best == nullptr) return nlohmann::json();
  nlohmann::json j;
  j["aio"] = AioSectionJson(best->spec.aio);
  j["strata"] = {{"aio_engine", IoEngineKindName(best->spec.aio.engine)}};
  j["measured"] = {{"read_gbps", best_read}, {"write_gbps", best_write}};
  return j;
}

}  // namespace strata::aio_bench
