#include "data/dataset/jsonl_example.h"

namespace strata::data {
namespace {

using json = nlohmann::ordered_json;

Status LineError(std::string_view file, int64_t line_no, const std::string& what) {
  return InvalidArgumentError(std::string(file) + ":" + std::to_string(line_no) + ": " + what);
}

const char* kFormats =
    "a line must be a JSON object with \"text\", \"instruction\"+\"output\" (Alpaca), "
    "\"messages\" (OpenAI role/content) or \"conversations\" (ShareGPT from/value)";

}  // namespace

Result<Example> ParseExampleLine(std::string_view line, std::string_view file, int64_t line_no) {
  auto err = [&](const std::string& what) { return LineError(file, line_no, what); };
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return err("not valid JSON");
  if (!j.is_object()) return err(kFormats);
  auto string_field = [&](const json& obj, const char* key, const std::string& path, bool required,
                          std::string& out) -> Status {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (required) return err("field '" + path + "' is missing");
      return Status::Ok();
    }
    if (!it->is_string())
      return err("field '" + path + "' must be a string, not " + it->type_name());
    out = it->get<std::string>();
    return Status::Ok();
  };
  Example ex;
  if (j.contains("text")) {
    STRATA_RETURN_IF_ERROR(string_field(j, "text", "text", true, ex.text));
    if (ex.text.empty()) return err("field 'text' is empty");
    return ex;
  }
  ex.kind = Example::Kind::kChat;
  ex.messages = json::array();
  if (j.contains("instruction")) {
    std::string system, instruction, input, output;
    STRATA_RETURN_IF_ERROR(string_field(j, "system", "system", false, system));
    STRATA_RETURN_IF_ERROR(string_field(j, "instruction", "instruction", true, instruction));
    STRATA_RETURN_IF_ERROR(string_field(j, "input", "input", false, input));
    STRATA_RETURN_IF_ERROR(string_field(j, "output", "output", true, output));
    if (!system.empty()) ex.messages.push_back({{"role", "system"}, {"content", system}});
    ex.messages.push_back(
        {{"role", "user"},
         {"content", input.empty() ? instruction : instruction + "\n\n" + input}});
    ex.messages.push_back({{"role", "assistant"}, {"content", output}});
    return ex;
  }
  bool openai = j.contains("messages");
  if (!openai && !j.contains("conversations")) return err(kFormats);
  const char* list_key = openai ? "messages" : "conversations";
  const char* role_key = openai ? "role" : "from";
  const char* content_key = openai ? "content" : "value";
  const json& turns = j[list_key];
  if (!turns.is_array()) return err(std::string("field '") + list_key + "' must be a list");
  if (turns.empty()) return err(std::string("field '") + list_key + "' is empty");
  bool has_assistant = false;
  for (size_t k = 0; k < turns.size(); ++k) {
    std::string at = std::string(list_key) + "[" + std::to_string(k) + "]";
    if (!turns[k].is_object()) return err("field '" + at + "' must be an object");
    std::string role, content;
    STRATA_RETURN_IF_ERROR(string_field(turns[k], role_key, at + "." + role_key, true, role));
    STRATA_RETURN_IF_ERROR(
        string_field(turns[k], content_key, at + "." + content_key, true, content));
    if (!openai) {
      if (role == "human" || role == "user") {
        role = "user";
      } else if (role == "gpt" || role == "assistant") {
        role = "assistant";
      } else if (role != "system" && role != "tool") {
        return err("field '" + at + ".from' is '" + role +
                   "' (allowed: human, user, gpt, assistant, system, tool)");
      }
    } else if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return err("field '" + at + ".role' is '" + role +
                 "' (allowed: system, user, assistant, tool)");
    }
    has_assistant = has_assistant || role == "assistant";
    ex.messages.push_back({{"role", role}, {"content", content}});
  }
  if (!has_assistant) {
    return err(
        std::string("field '") + list_key +
        "' has no assistant turn, so nothing would be trained (add one, or use {\"text\": ...})");
  }
  return ex;
}

}  // namespace strata::data
