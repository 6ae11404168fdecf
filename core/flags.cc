#include "core/flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "core/json_config.h"
#include "core/units.h"

namespace strata {

FlagParser::FlagParser(std::string usage) : usage_(std::move(usage)) {}

void FlagParser::Add(Flag flag) { flags_.push_back(std::move(flag)); }

FlagParser::Flag* FlagParser::Find(std::string_view name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void FlagParser::String(std::string name, std::string* out, std::string help) {
  Add({name, "STR", std::move(help), *out, false, nullptr, [out](std::string_view v) {
         *out = std::string(v);
         return Status::Ok();
       }});
}

void FlagParser::Choice(std::string name, std::string* out, std::vector<std::string> allowed,
                        std::string help) {
  std::string joined;
  for (const std::string& a : allowed) joined += (joined.empty() ? "" : "|") + a;
  Add({name, joined, std::move(help), *out, false, nullptr,
       [out, allowed, joined, name](std::string_view v) {
         if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
           return InvalidArgumentError("--" + name + " " + std::string(v) +
                                       ": allowed values are " + joined);
         }
         *out = std::string(v);
         return Status::Ok();
       }});
}

void FlagParser::Int(std::string name, int64_t* out, std::string help, int64_t min_value,
                     int64_t max_value) {
  Add({name, "N", std::move(help), std::to_string(*out), false, nullptr,
       [out, name, min_value, max_value](std::string_view v) {
         std::string s(v);
         char* end = nullptr;
         errno = 0;
         long long x = std::strtoll(s.c_str(), &end, 10);
         if (s.empty() || *end != '\0' || errno == ERANGE) {
           return InvalidArgumentError("--" + name + " " + s + ": not an integer");
         }
         if (x < min_value || x > max_value) {
           return InvalidArgumentError("--" + name + " " + s + ": must be in [" +
                                       std::to_string(min_value) + ", " +
                                       std::to_string(max_value) + "]");
         }
         *out = x;
         return Status::Ok();
       }});
}

void FlagParser::Double(std::string name, double* out, std::string help) {
  std::ostringstream def;
  def << *out;
  Add({name, "X", std::move(help), def.str(), false, nullptr, [out, name](std::string_view v) {
         std::string s(v);
         char* end = nullptr;
         double x = std::strtod(s.c_str(), &end);
         if (s.empty() || *end != '\0') {
           return InvalidArgumentError("--" + name + " " + s + ": not a number");
         }
         *out = x;
         return Status::Ok();
       }});
}

void FlagParser::Bytes(std::string name, uint64_t* out, std::string help) {
  Add({name, "SIZE", std::move(help), FormatBytes(*out), false, nullptr,
       [out, name](std::string_view v) {
         Result<uint64_t> r = ParseByteSize(v);
         if (!r.ok()) return r.status().WithContext("--" + name);
         *out = *r;
         return Status::Ok();
       }});
}

void FlagParser::Bool(std::string name, bool* out, std::string help) {
  Add({name, "", std::move(help), *out ? "true" : "false", true, out,
       [out, name](std::string_view v) {
         if (v == "true" || v == "1") {
           *out = true;
         } else if (v == "false" || v == "0") {
           *out = false;
         } else {
           return InvalidArgumentError("--" + name + "=" + std::string(v) +
                                       ": allowed values are true, false");
         }
         return Status::Ok();
       }});
}

void FlagParser::Custom(std::string name, std::string value_name,
                        std::function<Status(std::string_view)> fn, std::string help) {
  Add({std::move(name), std::move(value_name), std::move(help), "", false, nullptr, std::move(fn)});
}

bool FlagParser::WasSet(std::string_view name) const {
  return std::find(set_.begin(), set_.end(), name) != set_.end();
}

Status FlagParser::Parse(int argc, char** argv, int first, std::vector<std::string>* positional,
                         size_t* after_dashdash) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return Parse(args, positional, after_dashdash);
}

Status FlagParser::Parse(const std::vector<std::string>& args, std::vector<std::string>* positional,
                         size_t* after_dashdash) {
  if (after_dashdash != nullptr) *after_dashdash = SIZE_MAX;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      if (after_dashdash != nullptr) *after_dashdash = positional->size();
      positional->insert(positional->end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                         args.end());
      return Status::Ok();
    }
    if (a == "--help" || a == "-h") {
      help_requested_ = true;
      return Status::Ok();
    }
    if (a.size() < 3 || a[0] != '-' || a[1] != '-') {
      if (a.size() > 1 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9')) {
        return InvalidArgumentError("unknown flag " + a + " (flags are --name; see --help)");
      }
      positional->push_back(a);
      continue;
    }
    std::string body = a.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      value = body.substr(eq + 1);
      body.resize(eq);
      has_value = true;
    }
    Flag* f = Find(body);
    bool negated = false;
    if (f == nullptr && body.rfind("no-", 0) == 0) {
      f = Find(body.substr(3));
      if (f != nullptr && !f->is_bool) f = nullptr;
      negated = f != nullptr;
    }
    if (f == nullptr) {
      std::string best;
      int best_d = 3;
      for (const Flag& g : flags_) {
        int d = EditDistance(body, g.name);
        if (d < best_d) best_d = d, best = g.name;
      }
      return InvalidArgumentError(
          "unknown flag --" + body +
          (best.empty() ? std::string(" (see --help)") : " (did you mean --" + best + "?)"));
    }
    set_.push_back(f->name);
    if (f->is_bool) {
      if (negated) {
        if (has_value) return InvalidArgumentError("--no-" + f->name + " takes no value");
        *f->bool_out = false;
      } else if (has_value) {
        STRATA_RETURN_IF_ERROR(f->set(value));
      } else {
        *f->bool_out = true;
      }
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return InvalidArgumentError("--" + f->name + " needs a value (" + f->value_name + ")");
      }
      value = args[++i];
    }
    STRATA_RETURN_IF_ERROR(f->set(value));
  }
  return Status::Ok();
}

std::string FlagParser::Help() const {
  std::string out = "usage: " + usage_ + "\n";
  size_t width = 0;
  auto head = [](const Flag& f) {
    return "--" + f.name + (f.value_name.empty() ? "" : " " + f.value_name);
  };
  for (const Flag& f : flags_) width = std::max(width, head(f).size());
  for (const Flag& f : flags_) {
    std::string h = head(f);
    out += "  " + h + std::string(width - h.size() + 2, ' ') + f.help;
    if (!f.default_text.empty() && f.default_text != "false") {
      out += " (default " + f.default_text + ")";
    }
    out += "\n";
  }
  return out;
}

}  // namespace strata
