// HostTask: a move-only `Status()` callable stored inline (no heap allocation), for host-function
// launches on a stream (the analogue of cudaLaunchHostFunc).
//
// Captures must fit in kInlineBytes; a bigger capture is a compile error, not a silent
// allocation: capture a pointer to the state instead. Callables may return Status or void.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "core/status.h"

namespace strata {

class HostTask {
 public:
  static constexpr size_t kInlineBytes = 48;

  HostTask() = default;

  template <typename F, typename D = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<D, HostTask>>>
  HostTask(F&& f) {  // NOLINT: implicit, like std::function
    static_assert(sizeof(D) <= kInlineBytes, "HostTask capture too large: capture a pointer");
    static_assert(alignof(D) <= alignof(std::max_align_t), "HostTask capture over-aligned");
    static_assert(std::is_nothrow_move_constructible_v<D>, "HostTask callable must move nothrow");
    static_assert(std::is_invocable_v<D&>, "HostTask callable takes no arguments");
    new (storage_) D(std::forward<F>(f));
    ops_ = &kOps<D>;
  }

  HostTask(HostTask&& o) noexcept { MoveFrom(o); }
  HostTask& operator=(HostTask&& o) noexcept {
    if (this != &o) {
      Reset();
      MoveFrom(o);
    }
    return *this;
  }
  HostTask(const HostTask&) = delete;
  HostTask& operator=(const HostTask&) = delete;
  ~HostTask() { Reset(); }

  explicit operator bool() const { return ops_ != nullptr; }

  // Runs the callable. Precondition: non-empty.
  Status operator()() { return ops_->call(storage_); }

  void Reset() {
    if (ops_ != nullptr) ops_->destroy(storage_);
    ops_ = nullptr;
  }

 private:
  struct Ops {
    Status (*call)(void*);
    void (*move)(void* dst, void* src);  // move-constructs into dst, destroys src
    void (*destroy)(void*);
  };

  template <typename D>
  static Status Call(void* p) {
    D& f = *std::launder(static_cast<D*>(p));
    if constexpr (std::is_void_v<std::invoke_result_t<D&>>) {
      f();
      return Status::Ok();
    } else {
      return f();
    }
  }
  template <typename D>
  static constexpr Ops kOps = {
      &Call<D>,
      [](void* dst, void* src) {
        D* s = std::launder(static_cast<D*>(src));
        new (dst) D(std::move(*s));
        s->~D();
      },
      [](void* p) { std::launder(static_cast<D*>(p))->~D(); },
  };

  void MoveFrom(HostTask& o) {
    if (o.ops_ != nullptr) {
      o.ops_->move(storage_, o.storage_);
      ops_ = o.ops_;
      o.ops_ = nullptr;
    }
  }

  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace strata
