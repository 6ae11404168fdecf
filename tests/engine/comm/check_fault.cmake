# Runs comm_fault_main under mpirun (-D MPIEXEC, NP, EXE, MODE) and passes when every rank but
# the last printed FAULT_OK. The job may end with a non-zero code: ranks whose collective failed
# exit without MPI_Finalize (a peer may be gone), by design.
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe --mca orte_allowed_exit_without_sync 1
          -n ${NP} ${EXE} ${MODE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 60)
message("${out}")
string(REGEX MATCHALL "FAULT_OK" oks "${out}")
list(LENGTH oks n_ok)
math(EXPR want "${NP} - 1")
if(NOT n_ok EQUAL want OR out MATCHES "FAULT_BAD")
  message(FATAL_ERROR "expected ${want} FAULT_OK lines, got ${n_ok} (mpirun ${rc})\n${err}")
endif()
