// Test helper: a Chrome trace file parsed into its thread tracks and complete ("X") spans.
#pragma once

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata::testing {

struct ParsedTrace {
  std::map<int, std::string> tracks;  // tid -> thread_name
  std::vector<nlohmann::json> spans;  // "X" events, in file order
};

inline ParsedTrace ParseTrace(const std::string& path) {
  ParsedTrace t;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  if (!in.good()) return t;
  const nlohmann::json doc = nlohmann::json::parse(in);  // throws (fails the test) if malformed
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") {
      t.tracks[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    } else if (e.at("ph") == "X") {
      t.spans.push_back(e);
    }
  }
  return t;
}

}  // namespace strata::testing
