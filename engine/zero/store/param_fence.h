// ParamFence: which stage-3 parameter shards are not final yet, because the optimizer step that
// updates them was deferred into the next forward (strata.deferred_updates, Note [Deferred
// updates] in engine/overlap/step_overlap_defer.cc), and how a gather waits for one.
//
// The store (engine/zero/store/param_store.h) asks Pending before it reads a shard: its Prefetch
// skips a pending shard (the read would fetch the old bytes) and its Acquire refuses one with an
// Internal error, so no gather can read a parameter before its update. The hooks
// (engine/zero/hooks/zero3_hooks.h) call Await before a gather's Acquire, and Poll at every module
// so updates the worker finished reach the store while the forward runs.
//
// Thread safety: every call comes from the engine's thread.
#pragma once

#include <cstddef>

#include "core/status.h"

namespace strata {

class ParamFence {
 public:
  virtual ~ParamFence() = default;
  // True while parameter `param`'s shard still waits for its deferred update.
  virtual bool Pending(size_t param) const = 0;
  // Blocks until parameter `param`'s shard holds its updated values (writing finished updates
  // into the store on this thread as it goes). The update's error, naming the sub-group.
  virtual Status Await(size_t param) = 0;
  // Hands the updates finished so far to the store without waiting; the first error.
  virtual Status Poll() = 0;
};

}  // namespace strata
