// aio_bench output: the results table, the JSON document and the pasteable `aio` section.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/aio_bench/bench_runner.h"

namespace strata::aio_bench {

struct Row {
  PointSpec spec;
  PointResult result;
};

void PrintTable(const std::vector<Row>& rows);
nlohmann::json RowJson(const Row& row);
// The configuration with the best harmonic mean of read and write GB/s (rows measured both
// ways), or the best single op if only one was measured. Empty if no rows.
nlohmann::json BestConfig(const std::vector<Row>& rows);

}  // namespace strata::aio_bench
