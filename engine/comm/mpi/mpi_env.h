// The process's MPI: initialised once (MPI_THREAD_MULTIPLE: each communicator's progress thread
// calls MPI, and so may the application), finalised at exit unless a peer may be dead (then
// MPI_Finalize could wait forever for it). Also the one seam where MPI error codes become Status,
// and the datatypes and reduction ops (16-bit sums and maxima formed in fp32). Internal.
#pragma once

#include <mpi.h>

#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"
#include "engine/comm/communicator.h"

namespace strata::internal {

// Initialises MPI if nobody has (the application may have, with MPI_THREAD_MULTIPLE).
// Unavailable if MPI cannot start or the thread level is below MPI_THREAD_MULTIPLE.
Status EnsureMpi();
// A collective timed out: a peer may be gone, so MPI_Finalize is skipped at exit.
void MarkMpiUnclean();

// The seam: MPI_SUCCESS -> OK, else "<what>: <MPI's error string> (MPI error class N)".
Status MpiStatus(int rc, std::string_view what);

// MPI_Comm_idup of `parent` polled against a deadline: a rank that never arrives is Aborted (and
// MPI is marked unclean), not a hang. The duplicate returns errors (MPI_ERRORS_RETURN).
Status DupWithTimeout(MPI_Comm parent, MPI_Comm* out, double timeout_s, const std::string& what);

// MPI_FLOAT for fp32, MPI_UINT16_T for the 16-bit types (reduced with the ops below).
MPI_Datatype MpiType(DType dtype);
// MPI_SUM / MPI_MAX for fp32; user ops that combine in fp32 for fp16 / bf16.
MPI_Op MpiOp(ReduceOp op, DType dtype);

}  // namespace strata::internal
