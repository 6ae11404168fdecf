#include "core/status.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace strata {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kOutOfMemory:
      return "OutOfMemory";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m), sys_errno_);
}

Status ErrnoToStatus(int err, std::string_view what) {
  char buf[128];
  // GNU strerror_r returns the message pointer (which may or may not be buf).
  const char* text = strerror_r(err, buf, sizeof buf);
  std::string m(what);
  m += ": ";
  m += text;
  m += " (errno " + std::to_string(err) + ")";
  StatusCode code = StatusCode::kIoError;
  if (err == ENOENT) code = StatusCode::kNotFound;
  if (err == EINVAL) code = StatusCode::kInvalidArgument;
  if (err == ENOMEM) code = StatusCode::kOutOfMemory;
  return Status(code, std::move(m), err);
}

namespace internal {
void CheckFailed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "strata: check failed at %s:%d: %s %.*s\n", file, line, cond,
               static_cast<int>(msg.size()), msg.data());
  std::abort();
}
}  // namespace internal

}  // namespace strata
