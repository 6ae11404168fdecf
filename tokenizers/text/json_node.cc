#include "tokenizers/text/json_node.h"

#include "tokenizers/text/utf8.h"

namespace strata::tokenizers::internal {

std::string JoinPath(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : std::string(path) + "." + std::string(key);
}

std::string IndexPath(std::string_view path, size_t index) {
  return std::string(path) + "[" + std::to_string(index) + "]";
}

namespace {
Status WrongType(std::string_view path, const char* key, const char* want, const Json& v) {
  return InvalidArgumentError(JoinPath(path, key) + ": expected " + want + ", got " +
                              std::string(v.type_name()));
}
const Json* Find(const Json& node, const char* key) {
  if (!node.is_object()) return nullptr;
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return nullptr;
  return &*it;
}
Status Missing(std::string_view path, const char* key) {
  return InvalidArgumentError(JoinPath(path, key) + ": missing");
}
}  // namespace

Result<std::string> GetString(const Json& node, std::string_view path, const char* key,
                              std::optional<std::string> def) {
  const Json* v = Find(node, key);
  if (v == nullptr) {
    if (def) return *def;
    return Missing(path, key);
  }
  if (!v->is_string()) return WrongType(path, key, "a string", *v);
  return v->get<std::string>();
}

Result<bool> GetBool(const Json& node, std::string_view path, const char* key,
                     std::optional<bool> def) {
  const Json* v = Find(node, key);
  if (v == nullptr) {
    if (def) return *def;
    return Missing(path, key);
  }
  if (!v->is_boolean()) return WrongType(path, key, "true or false", *v);
  return v->get<bool>();
}

Result<int64_t> GetInt(const Json& node, std::string_view path, const char* key,
                       std::optional<int64_t> def) {
  const Json* v = Find(node, key);
  if (v == nullptr) {
    if (def) return *def;
    return Missing(path, key);
  }
  if (!v->is_number_integer()) return WrongType(path, key, "an integer", *v);
  return v->get<int64_t>();
}

Result<const Json*> GetArray(const Json& node, std::string_view path, const char* key) {
  const Json* v = Find(node, key);
  if (v == nullptr) return Missing(path, key);
  if (!v->is_array()) return WrongType(path, key, "an array", *v);
  return v;
}

Status Unsupported(std::string_view path, std::string_view what, std::string_view allowed) {
  return UnimplementedError(std::string(path) + ": " + std::string(what) + " is not supported (" +
                            std::string(allowed) + ")");
}

Result<std::string> GetType(const Json& node, std::string_view path,
                            std::initializer_list<std::string_view> supported) {
  if (!node.is_object()) {
    return InvalidArgumentError(std::string(path) + ": expected an object, got " +
                                node.type_name());
  }
  STRATA_ASSIGN_OR_RETURN(std::string type, GetString(node, path, "type"));
  std::string list;
  for (std::string_view s : supported) {
    if (s == type) return type;
    list += (list.empty() ? "" : ", ") + std::string(s);
  }
  return Unsupported(JoinPath(path, "type"), "'" + type + "'", "supported: " + list);
}

Result<Regex> GetPattern(const Json& node, std::string_view path, const char* key) {
  const Json* v = Find(node, key);
  if (v == nullptr) return Missing(path, key);
  const std::string p = JoinPath(path, key);
  if (v->is_object() && v->size() == 1) {
    if (v->contains("String") && (*v)["String"].is_string()) {
      return Regex::Compile((*v)["String"].get<std::string>(), /*literal=*/true);
    }
    if (v->contains("Regex") && (*v)["Regex"].is_string()) {
      auto re = Regex::Compile((*v)["Regex"].get<std::string>(), /*literal=*/false);
      if (!re.ok()) return re.status().WithContext(p + ".Regex");
      return re;
    }
  }
  return InvalidArgumentError(p + ": expected {\"String\": ...} or {\"Regex\": ...}, got " +
                              v->dump());
}

Result<std::string> GetChar(const Json& node, std::string_view path, const char* key,
                            std::optional<std::string> def) {
  STRATA_ASSIGN_OR_RETURN(std::string s, GetString(node, path, key, std::move(def)));
  int len = 0;
  if (s.empty() || FindInvalidUtf8(s) != std::string::npos ||
      (DecodeUtf8(s, 0, &len), static_cast<size_t>(len) != s.size())) {
    return InvalidArgumentError(JoinPath(path, key) + ": expected one character, got '" + s + "'");
  }
  return s;
}

}  // namespace strata::tokenizers::internal
