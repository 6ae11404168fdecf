// The pool behind MakeRequestState: allocate_shared puts the control block and the RequestState
// in one block of a fixed size; finished blocks go to a free list instead of back to the heap.
#include "aio/aio_request.h"

#include <mutex>
#include <new>
#include <vector>

namespace strata::internal {
namespace {

class BlockPool {
 public:
  static BlockPool& Get() {
    static BlockPool* pool = new BlockPool();  // never destroyed: futures may outlive main()
    return *pool;
  }
  void* Allocate(size_t bytes) {
    {
      std::lock_guard lock(mu_);
      if (bytes == block_bytes_ && !free_.empty()) {
        void* p = free_.back();
        free_.pop_back();
        return p;
      }
      if (block_bytes_ == 0) block_bytes_ = bytes;
    }
    return ::operator new(bytes);
  }
  void Free(void* p, size_t bytes) {
    {
      std::lock_guard lock(mu_);
      if (bytes == block_bytes_ && free_.size() < kMaxFree) {
        if (free_.capacity() == 0) free_.reserve(kMaxFree);
        free_.push_back(p);
        return;
      }
    }
    ::operator delete(p);
  }

 private:
  static constexpr size_t kMaxFree = 4096;
  std::mutex mu_;
  size_t block_bytes_ = 0;
  std::vector<void*> free_;
};

template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding is implicit by design
  T* allocate(size_t n) { return static_cast<T*>(BlockPool::Get().Allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { BlockPool::Get().Free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace

std::shared_ptr<RequestState> MakeRequestState(int segments) {
  return std::allocate_shared<RequestState>(PoolAllocator<RequestState>(), segments);
}

}  // namespace strata::internal
