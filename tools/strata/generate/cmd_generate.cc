// `strata generate --model DIR --prompt TEXT`: runs a model Strata trains (a Hugging Face
// directory or a Strata checkpoint, read in place) forward with a KV cache and prints what it
// writes, as it writes it. Weights are placed as the config's zero_optimization.offload_param
// says (ZeRO-Inference: device, pinned CPU, or NVMe streamed a layer ahead; generate_place.h).
// Text goes through the model's tokenizer and, with --chat, its chat template (generate_text.h);
// without a tokenizer.json the prompt's bytes are the token ids, as `strata train` reads text.
// Exit 0 ok, 1 failed while running, 2 bad usage or input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/flags.h"
#include "models/infer/generator.h"
#include "models/llama/config/llama_config.h"
#include "models/llama/model/llama_decode.h"
#include "tools/strata/generate/generate_place.h"
#include "tools/strata/generate/generate_text.h"
#include "tools/strata/generate/generate_weights.h"
#include "tools/strata/subcommand.h"

namespace strata::cli {
namespace {

constexpr const char* kGenerateUsage =
    "strata generate --model DIR --prompt TEXT [--prompt TEXT2 ...] [--config CFG]\n"
    "                [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "                [--stop-id ID ...] [--chat FILE.jsonl] [--tokenizer DIR] [--tag T] [--json]\n"
    "  Generates text from a Hugging Face directory or a Strata checkpoint (strata train --save).";

struct GenerateCliOptions {
  std::string model, config, tag, chat, tokenizer;
  std::vector<std::string> prompts;
  std::vector<int32_t> stop_ids;
  int64_t max_new_tokens = 64, top_k = 0, seed = 0;
  double temperature = 0.0, top_p = 1.0;
  bool json = false;
};

int GenerateFail(int code, const std::string& what) {
  std::fprintf(stderr, "strata generate: %s\n", what.c_str());
  return code;
}

std::string GenerateMib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

// --chat FILE.jsonl: one conversation a line, {"messages": [...]} or a bare list of messages.
Result<std::vector<nlohmann::ordered_json>> ReadChats(const std::string& path) {
  std::ifstream f(path);
  if (!f) return NotFoundError("--chat " + path + ": cannot open");
  std::vector<nlohmann::ordered_json> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("messages")) j = j["messages"];
    if (!j.is_array() || j.empty()) {
      return InvalidArgumentError(path + ":" + std::to_string(n) +
                                  ": expected {\"messages\": [{\"role\": ..., \"content\": ...}, "
                                  "...]} or a list of messages");
    }
    out.push_back(std::move(j));
  }
  if (out.empty()) return InvalidArgumentError("--chat " + path + ": no conversations");
  return out;
}

int RunGenerate(const GenerateCliOptions& o) {
  auto weights = OpenGenerateWeights(o.model, o.tag);
  if (!weights.ok()) return GenerateFail(2, weights.status().message());
  const llama::LlamaConfig& mc = weights->config;
  std::vector<std::string> text_dirs = weights->text_dirs;
  if (!o.tokenizer.empty()) text_dirs = {o.tokenizer};
  auto text = GenerateText::Open(text_dirs, mc.vocab_size);
  if (!text.ok()) return GenerateFail(2, text.status().message());
  for (int32_t id : o.stop_ids) {
    if (id < 0 || id >= mc.vocab_size) {
      return GenerateFail(2, "--stop-id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                 std::to_string(mc.vocab_size) + ")");
    }
  }
  // Each prompt's text (as shown) and ids.
  std::vector<std::string> shown;
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : o.prompts) {
    if (p.empty()) return GenerateFail(2, "--prompt is empty (the model needs at least one token)");
    auto ids = text->EncodePrompt(p);
    if (!ids.ok()) return GenerateFail(2, "--prompt: " + ids.status().message());
    shown.push_back(p);
    prompts.push_back(std::move(*ids));
  }
  if (!o.chat.empty()) {
    auto chats = ReadChats(o.chat);
    if (!chats.ok()) return GenerateFail(2, chats.status().message());
    for (const auto& messages : *chats) {
      std::string rendered;
      auto ids = text->EncodeChat(messages, &rendered);
      if (!ids.ok()) return GenerateFail(2, ids.status().message());
      shown.push_back(rendered);
      prompts.push_back(std::move(*ids));
    }
  }
  int64_t longest = 0;
  for (const auto& p : prompts)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
  const int64_t max_len = longest + o.max_new_tokens;
  if (Status s = llama::CheckSequenceLength(
          mc, max_len,
          "the longest prompt (" + std::to_string(longest) + " tokens) + --max-new-tokens " +
              std::to_string(o.max_new_tokens) + " = " + std::to_string(max_len));
      !s.ok()) {
    return GenerateFail(2, s.message() + " (shorten the prompt or lower --max-new-tokens)");
  }
  infer::GenerateOptions go;
  go.max_new_tokens = o.max_new_tokens;
  go.sampling.temperature = o.temperature;
  go.sampling.top_k = o.top_k;
  go.sampling.top_p = o.top_p;
  go.sampling.seed = static_cast<uint64_t>(o.seed);
  go.stop_ids = o.stop_ids;
  for (int32_t id : text->stop_ids()) go.stop_ids.push_back(id);
  if (Status s = infer::ValidateSampling(go.sampling); !s.ok()) return GenerateFail(2, s.message());

  const infer::KvCachePlan plan =
      llama::PlanLlamaKvCache(mc, static_cast<int64_t>(prompts.size()), max_len);
  int code = 2;
  auto placed = PlaceForGenerate(*weights, o.config, plan, &code);
  if (!placed.ok()) return GenerateFail(code, placed.status().message());
  GeneratePlacement& pl = **placed;
  std::fprintf(stderr,
               "strata generate: %s, %.2fM parameters, weights %s; text: %s\n"
               "strata generate: KV cache %lld layers x %zu sequences x %lld positions: %s "
               "(+ %s workspace) on the device\n",
               weights->source.c_str(), static_cast<double>(mc.NumParameters()) / 1e6,
               pl.where.c_str(), text->source().c_str(),
               static_cast<long long>(mc.num_hidden_layers), prompts.size(),
               static_cast<long long>(plan.cache_rows), GenerateMib(plan.cache_bytes).c_str(),
               GenerateMib(plan.workspace_bytes).c_str());
  auto dec = llama::LlamaDecoder::Create(pl.model.get(), plan.max_batch, plan.max_len);
  if (!dec.ok()) return GenerateFail(1, dec.status().message());
  pl.Attach(**dec);
  const bool stream_text = !o.json && prompts.size() == 1;
  if (stream_text) {
    std::fwrite(shown[0].data(), 1, shown[0].size(), stdout);
    std::fflush(stdout);
  }
  TextStream stream(&*text);
  const nn::RunContext ctx{pl.device.get(), pl.stream, false};
  auto r = infer::Generate(**dec, ctx, prompts, go, [&](int64_t, int32_t tok) {
    if (!stream_text) return;
    const std::string t = stream.Push(tok);
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  });
  if (!r.ok()) return GenerateFail(1, r.status().message());
  int64_t new_tokens = 0;
  for (const auto& t : r->tokens) new_tokens += static_cast<int64_t>(t.size());
  const double tok_s = r->decode_s > 0 ? static_cast<double>(r->decode_steps) *
                                             static_cast<double>(prompts.size()) / r->decode_s
                                       : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["model"] = weights->source;
    j["weights"] = pl.where;
    j["text"] = text->source();
    j["kv_cache"] = {{"cache_bytes", plan.cache_bytes},
                     {"workspace_bytes", plan.workspace_bytes},
                     {"max_len", plan.max_len},
                     {"cache_rows", plan.cache_rows},
                     {"sequences", plan.max_batch}};
    for (size_t b = 0; b < prompts.size(); ++b) {
      j["results"].push_back({{"prompt", shown[b]},
                              {"prompt_tokens", prompts[b].size()},
                              {"text", text->Decode(r->tokens[b])},
                              {"tokens", r->tokens[b]},
                              {"finish_reason", r->finish_reasons[b]}});
    }
    j["prefill_s"] = r->prefill_s;
    j["decode_s"] = r->decode_s;
    j["decode_steps"] = r->decode_steps;
    j["new_tokens"] = new_tokens;
    j["decode_tokens_per_s"] = tok_s;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    if (stream_text) {
      const std::string rest = stream.Flush();
      std::printf("%s\n", rest.c_str());
    } else {
      for (size_t b = 0; b < prompts.size(); ++b) {
        std::printf("--- %zu (%s) ---\n%s%s\n", b, r->finish_reasons[b].c_str(), shown[b].c_str(),
                    text->Decode(r->tokens[b]).c_str());
      }
    }
    std::fprintf(
        stderr, "strata generate: %lld new tokens; prefill %.3f s, decode %.3f s (%.1f tokens/s)\n",
        static_cast<long long>(new_tokens), r->prefill_s, r->decode_s, tok_s);
  }
  (*dec)->Release();
  return 0;
}

int RunGenerate(const std::vector<std::string>& args) {
  GenerateCliOptions o;
  FlagParser flags(kGenerateUsage);
  flags.String("model", &o.model, "a Hugging Face directory or a Strata checkpoint directory");
  flags.String("config", &o.config, "DeepSpeed JSON config: offload_param places the weights");
  flags.String("tag", &o.tag, "the checkpoint tag (default: the one `latest` names)");
  flags.String("chat", &o.chat,
               "JSONL of conversations ({\"messages\": [...]} a line), rendered by the model's "
               "chat template");
  flags.String("tokenizer", &o.tokenizer,
               "a directory with tokenizer.json (default: the model's; none: byte-level ids)");
  flags.Custom(
      "prompt", "TEXT",
      [&](std::string_view v) {
        o.prompts.emplace_back(v);
        return Status::Ok();
      },
      "a prompt (repeat for a batch of prompts)");
  flags.Custom(
      "stop-id", "ID",
      [&](std::string_view v) -> Status {
        try {
          o.stop_ids.push_back(std::stoi(std::string(v)));
        } catch (...) {
          return InvalidArgumentError("--stop-id wants a token id, got '" + std::string(v) + "'");
        }
        return Status::Ok();
      },
      "stop a sequence at this token id (repeatable)");
  flags.Int("max-new-tokens", &o.max_new_tokens, "tokens to generate at most per prompt", 0);
  flags.Double("temperature", &o.temperature, "0: greedy; > 0: sample from softmax(logits / T)");
  flags.Int("top-k", &o.top_k, "sample among the k most likely tokens (0: all)", 0);
  flags.Double("top-p", &o.top_p, "sample among the smallest set reaching probability p (1: all)");
  flags.Int("seed", &o.seed, "the sampling seed", 0);
  flags.Bool("json", &o.json, "one JSON object on stdout instead of text");
  std::vector<std::string> positional;
  if (Status s = flags.Parse(args, &positional); !s.ok()) return GenerateFail(2, s.message());
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!positional.empty()) return GenerateFail(2, "unexpected argument '" + positional[0] + "'");
  if (o.model.empty()) return GenerateFail(2, "--model DIR is required\n" + flags.Help());
  if (o.prompts.empty() && o.chat.empty()) {
    return GenerateFail(2, "--prompt TEXT or --chat FILE.jsonl is required\n" + flags.Help());
  }
  return RunGenerate(o);
}

}  // namespace
}  // namespace strata::cli

STRATA_SUBCOMMAND(generate, "generate",
                  "generate text from a model or checkpoint: `strata generate --model DIR "
                  "--prompt TEXT`",
                  strata::cli::RunGenerate);
