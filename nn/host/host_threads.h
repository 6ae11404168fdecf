// Threads of the host nn backend. GEMMs run on OpenBLAS's own pool, the other ops on oneTBB's
// (bounded by the caller's tbb::global_control / task_arena); one op never uses both at once.
#pragma once

namespace strata::nn {

// Sets OpenBLAS's thread count (process-wide, like OPENBLAS_NUM_THREADS).
void SetHostBlasThreads(int threads);
int HostBlasThreads();

}  // namespace strata::nn
