#include "tokenizers/pipeline/post_processor.h"

#include <string>

namespace strata::tokenizers::internal {
namespace {

Status ReadTemplate(const Json& node, std::string_view path, PostProcessor* pp) {
  STRATA_ASSIGN_OR_RETURN(const Json* single, GetArray(node, path, "single"));
  const std::string single_path = JoinPath(path, "single");
  const Json* specials = node.contains("special_tokens") ? &node["special_tokens"] : nullptr;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    const std::string item_path = IndexPath(single_path, i);
    if (item.is_object() && item.contains("Sequence")) {
      // (A Result kept whole: GCC 12 misreads a moved-out string here as uninitialized.)
      const Result<std::string> id =
          GetString(item["Sequence"], JoinPath(item_path, "Sequence"), "id");
      if (!id.ok()) return id.status();
      if (*id != "A") {
        return Unsupported(JoinPath(item_path, "Sequence.id"), "'" + *id + "'",
                           "a single template holds sequence A only");
      }
      if (seen_sequence) {
        return Unsupported(item_path, "a second sequence", "a single template holds one");
      }
      seen_sequence = true;
      continue;
    }
    if (!item.is_object() || !item.contains("SpecialToken")) {
      return InvalidArgumentError(item_path + ": expected {\"Sequence\": ...} or " +
                                  "{\"SpecialToken\": ...}, got " + item.dump());
    }
    const std::string sp_path = JoinPath(item_path, "SpecialToken");
    STRATA_ASSIGN_OR_RETURN(const std::string name, GetString(item["SpecialToken"], sp_path, "id"));
    if (specials == nullptr || !specials->is_object() || !specials->contains(name)) {
      return InvalidArgumentError(sp_path + ".id: '" + name + "' is not in " +
                                  JoinPath(path, "special_tokens"));
    }
    const std::string tok_path = JoinPath(JoinPath(path, "special_tokens"), name);
    STRATA_ASSIGN_OR_RETURN(const Json* ids, GetArray((*specials)[name], tok_path, "ids"));
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) {
        return InvalidArgumentError(tok_path + ".ids: expected integers, got " + id.dump());
      }
      (seen_sequence ? pp->suffix : pp->prefix).push_back(id.get<int32_t>());
    }
  }
  if (!seen_sequence) {
    return InvalidArgumentError(single_path +
                                ": the template has no {\"Sequence\": {\"id\": \"A\"}}");
  }
  return Status::Ok();
}

Status Read(const Json& node, std::string_view path, PostProcessor* pp) {
  STRATA_ASSIGN_OR_RETURN(const std::string type,
                          GetType(node, path, {"TemplateProcessing", "ByteLevel", "Sequence"}));
  if (type == "TemplateProcessing") return ReadTemplate(node, path, pp);
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  STRATA_ASSIGN_OR_RETURN(const Json* list, GetArray(node, path, "processors"));
  const std::string list_path = JoinPath(path, "processors");
  for (size_t i = 0; i < list->size(); ++i) {
    STRATA_RETURN_IF_ERROR(Read((*list)[i], IndexPath(list_path, i), pp));
  }
  return Status::Ok();
}

}  // namespace

Result<PostProcessor> MakePostProcessor(const Json& node, std::string_view path) {
  PostProcessor pp;
  if (node.is_null()) return pp;
  STRATA_RETURN_IF_ERROR(Read(node, path, &pp));
  return pp;
}

}  // namespace strata::tokenizers::internal
