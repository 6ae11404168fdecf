#include "data/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "data/chat_template/jinja/eval/jinja_interpreter.h"
#include "data/chat_template/jinja/syntax/jinja_parser.h"

namespace strata::data {

Result<ChatTemplate> ChatTemplate::FromString(const std::string& source,
                                              nlohmann::ordered_json special_tokens) {
  STRATA_ASSIGN_OR_RETURN(jinja::Body body, jinja::Parse(source));
  ChatTemplate t;
  t.source_ = source;
  t.special_tokens_ =
      special_tokens.is_object() ? std::move(special_tokens) : nlohmann::ordered_json::object();
  t.body_ = std::make_shared<const jinja::Body>(std::move(body));
  return t;
}

Result<ChatTemplate> ChatTemplate::FromModelDir(const std::string& dir) {
  std::string path = dir + "/tokenizer_config.json";
  std::ifstream in(path);
  if (!in)
    return NotFoundError(path +
                         ": no such file (the model directory needs its tokenizer_config.json)");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(ss.str(), nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    return InvalidArgumentError(path + ": not a JSON object");
  nlohmann::ordered_json specials = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    if (it->is_string()) {
      specials[key] = *it;
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      specials[key] = (*it)["content"];
    } else {
      return InvalidArgumentError(path + ": " + key + " must be a string or {\"content\": ...}");
    }
  }
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) {
    return FailedPreconditionError(path +
                                   ": has no chat_template, so conversations cannot be "
                                   "rendered; use {\"text\": ...} lines, or add the model's "
                                   "chat_template to tokenizer_config.json");
  }
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else if (it->is_array()) {
    for (const auto& t : *it) {
      if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
          t["template"].is_string()) {
        source = t["template"].get<std::string>();
      }
    }
    if (source.empty())
      return InvalidArgumentError(path + ": chat_template is a list without a \"default\" entry");
  } else {
    return InvalidArgumentError(path +
                                ": chat_template must be a string or a list of {name, template}");
  }
  auto t = FromString(source, specials);
  if (!t.ok()) return t.status().WithContext(path + ": chat_template");
  return t;
}

Result<std::string> ChatTemplate::Apply(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra) const {
  if (!messages.is_array()) return InvalidArgumentError("chat template: messages must be a list");
  jinja::Dict vars;
  vars.emplace_back("messages", jinja::Value::FromJson(messages));
  vars.emplace_back("tools", jinja::Value::None());
  vars.emplace_back("documents", jinja::Value::None());
  vars.emplace_back("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
  for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it) {
    vars.emplace_back(it.key(), jinja::Value::FromJson(*it));
  }
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      vars.emplace_back(it.key(), jinja::Value::FromJson(*it));
    }
  }
  return jinja::Render(*body_, vars);
}

}  // namespace strata::data
