// AioOptions: how an AioHandle moves bytes. The first five fields mean what DeepSpeed's `aio`
// config section means (see docs/aio.md and configs/).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "aio/engine/io_engine.h"

namespace strata {

struct AioOptions {
  // A request is cut into pieces of this many bytes (a multiple of 4096).
  size_t block_size = size_t{1} << 20;
  // Pieces in flight per thread.
  int queue_depth = 8;
  // Threads; each owns one slice of every request (`intra_op_parallelism`, old `thread_count`).
  int thread_count = 1;
  // Submit pieces one system call at a time instead of in batches.
  bool single_submit = false;
  // Keep the queue full as pieces complete; false = lock-step batches of queue_depth.
  bool overlap_events = true;

  // Strata's own.
  IoEngineKind engine = IoEngineKind::kAuto;
  // A filesystem that refuses O_DIRECT falls back to buffered I/O (one line logged) instead of
  // failing.
  bool allow_buffered = false;
  bool fixed_files = true;         // io_uring: register files
  bool registered_buffers = true;  // io_uring: honour AioHandle::RegisterBuffer
  bool sqpoll = false;             // io_uring: SQPOLL thread (costs a core)
  // Record each piece's submit-to-completion time (AioHandle::TakeLatencies). For aio_bench.
  bool record_latency = false;

  // Tests: makes worker i's engine (e.g. a fault-injecting wrapper). Default: CreateIoEngine.
  std::function<Result<std::unique_ptr<IoEngine>>(int worker, const IoEngineOptions&)>
      engine_factory;
};

}  // namespace strata
