// Status and Result<T>: how every Strata layer reports recoverable failures.
//
// Library code throws no exceptions. A failure carries a code, a message that names what failed
// and where, and (for system calls) the errno it came from. Each layer adds context on the way up
// with WithContext(), e.g. "prefetch layer 12: read swap/rank0.bin @ 0x4000 (1 MiB): EIO".
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kOutOfMemory,  // the message names the tier (device, cpu, nvme)
  kIoError,
  kDataLoss,     // data read back is not what was written (checksum mismatch, file truncated)
  kUnavailable,  // backend not built, kernel feature or device missing
  kUnimplemented,
  kFailedPrecondition,
  kAborted,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), sys_errno_(sys_errno), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The errno this status was translated from, 0 if none.
  int sys_errno() const { return sys_errno_; }

  // "IoError: <message>" or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>". OK stays OK.
  Status WithContext(std::string_view context) const;

  // Marks a status as deliberately not inspected.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  int sys_errno_ = 0;
  std::string message_;
};

inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfMemoryError(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Translates an errno into a Status: "<what>: <strerror> (errno N)". ENOENT becomes NotFound,
// EINVAL InvalidArgument, ENOMEM OutOfMemory (cpu), everything else IoError.
Status ErrnoToStatus(int err, std::string_view what);

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const& {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // On a temporary, by value: `STRATA_RETURN_IF_ERROR(Foo().status())` (or `const Status& s =
  // Foo().status()`) would otherwise hold a reference into a Result destroyed at the end of the
  // statement, and an error's message would be read from freed memory.
  Status status() && { return ok() ? Status() : std::get<Status>(std::move(v_)); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, std::string_view msg);
inline const Status& AsStatus(const Status& s) { return s; }
template <typename T>
const Status& AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                                   \
  do {                                                                 \
    auto&& strata_result_ = (expr); /* lifetime-extends a temporary */ \
    if (!::strata::internal::AsStatus(strata_result_).ok())            \
      return ::strata::internal::AsStatus(strata_result_);             \
  } while (0)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_CONCAT(strata_result_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// Aborts with file:line for a broken invariant. Never for I/O, OOM or driver errors.
#define STRATA_CHECK(cond)                                                       \
  do {                                                                           \
    if (!(cond)) ::strata::internal::CheckFailed(__FILE__, __LINE__, #cond, {}); \
  } while (0)
#define STRATA_CHECK_MSG(cond, msg)                                                 \
  do {                                                                              \
    if (!(cond)) ::strata::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
