// AioFuture: the completion of one AioHandle request (or batch). A small copyable value; Wait()
// may be called repeatedly and from several threads.
#pragma once

#include <cstddef>
#include <memory>

#include "core/status.h"

namespace strata {

namespace internal {
class RequestState;
}  // namespace internal

class AioFuture {
 public:
  AioFuture() = default;
  bool valid() const { return state_ != nullptr; }
  bool ready() const;
  // Blocks until done: the byte count (the full request size) or the first error.
  Result<size_t> Wait() const;

 private:
  friend class AioHandle;
  explicit AioFuture(std::shared_ptr<internal::RequestState> s) : state_(std::move(s)) {}
  std::shared_ptr<internal::RequestState> state_;
};

}  // namespace strata
