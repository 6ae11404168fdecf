// `strata data prepare --model DIR --data FILE.jsonl --out DIR`: tokenizes a JSONL dataset once
// with the model's own tokenizer and chat template into a token file + label mask that training
// maps (data/prepare/prepare.h), with a progress line and a summary.
// Exit 0 ok, 1 failed while writing, 2 bad usage or invalid input (a bad line names file:line).
#include <cstdio>
#include <thread>

#include "core/flags.h"
#include "data/prepare/prepare.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

constexpr const char* kDataUsage =
    "strata data prepare --model DIR --data FILE.jsonl --out DIR [--train-on responses|all]\n"
    "                    [--max-length N] [--overlong truncate|skip] [--threads N]\n"
    "  Tokenizes a JSONL dataset ({\"text\"}, Alpaca instruction/input/output, OpenAI messages,\n"
    "  ShareGPT conversations) with the model's tokenizer and chat template.";

int DataFail(int code, const std::string& what) {
  std::fprintf(stderr, "strata data: %s\n", what.c_str());
  return code;
}

int RunData(const std::vector<std::string>& args) {
  if (args.empty() || (args[0] != "prepare" && args[0] != "--help" && args[0] != "-h")) {
    return DataFail(2, std::string("expected the action 'prepare'") +
                           (args.empty() ? "" : ", not '" + args[0] + "'") + "\n" + kDataUsage);
  }
  std::string model, data, out, train_on = "responses", overlong = "truncate";
  int64_t max_length = 0;
  int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  bool progress = true;
  FlagParser flags(kDataUsage);
  flags.String("model", &model, "model directory with tokenizer.json (+ tokenizer_config.json)");
  flags.String("data", &data, "the JSONL dataset");
  flags.String("out", &out, "directory for tokens.bin, mask.bin, prepared.json");
  flags.Choice("train-on", &train_on, {"responses", "all"},
               "tokens in the loss: the assistant's turns (responses) or every token (all)");
  flags.Int("max-length", &max_length, "longest example in tokens (0: no limit)", 0);
  flags.Choice("overlong", &overlong, {"truncate", "skip"},
               "what happens to an example longer than --max-length (counted either way)");
  flags.Int("threads", &threads, "tokenizing threads", 1, 1024);
  flags.Bool("progress", &progress, "a progress line on stderr");
  std::vector<std::string> positional;
  std::vector<std::string> rest(args.begin() + (args[0] == "prepare" ? 1 : 0), args.end());
  if (Status s = flags.Parse(rest, &positional); !s.ok()) return DataFail(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) return DataFail(2, "unexpected argument '" + positional[0] + "'");
  if (model.empty() || data.empty() || out.empty()) {
    return DataFail(2, "--model, --data and --out are required\n" + flags.Help());
  }
  data::PrepareOptions o;
  o.tokenize.train_on_prompt = train_on == "all";
  o.tokenize.max_tokens = max_length;
  o.tokenize.overlong = overlong == "skip" ? data::Overlong::kSkip : data::Overlong::kTruncate;
  o.threads = static_cast<int>(threads);
  data::PrepareProgress report;
  if (progress) {
    report = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\rprepare: %lld/%lld lines (%.0f%%)", static_cast<long long>(done),
                   static_cast<long long>(total),
                   total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0);
      if (done == total) std::fprintf(stderr, "\n");
    };
  }
  auto key = data::PrepareCacheKey(data, model, o.tokenize);
  if (!key.ok()) return DataFail(2, key.status().message());
  auto s = data::PrepareDataset(data, model, out, o, *key, report);
  if (!s.ok()) {
    const StatusCode c = s.status().code();
    return DataFail(c == StatusCode::kIoError || c == StatusCode::kInternal ? 1 : 2,
                    s.status().message());
  }
  std::printf("prepared %s -> %s: %s, %.2f s on %d threads\n", data.c_str(), out.c_str(),
              s->ToString().c_str(), s->seconds, o.threads);
  return 0;
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(data, "data",
                  "tokenize a JSONL dataset with the model's tokenizer and chat template: "
                  "`strata data prepare --model DIR --data FILE.jsonl --out DIR`",
                  strata::cli::RunData);
