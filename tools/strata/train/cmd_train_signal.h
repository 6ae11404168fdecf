// `strata train`'s preemption: SIGTERM and SIGINT (a scheduler, a spot instance's notice, a
// Ctrl-C) end a run at a step boundary instead of mid-step. The first signal only sets a flag;
// the loop asks at the end of each optimizer step, the ranks agree through one all-reduce (max)
// so all of them stop after the same step, the run saves when --save is set and exits with
// 128 + the signal (143 for SIGTERM, 130 for SIGINT). A second signal exits at once with that
// code, saving nothing (the last complete checkpoint stays loadable: Note [Checkpoint commit]).
#pragma once

#include <memory>

#include "core/status.h"
#include "engine/comm/communicator.h"
#include "offload/device/api/device.h"

namespace strata::cli {

// Installs the handlers for the life of the process (the run ends with it).
void InstallPreemptionHandlers();

// The exit code of a run stopped by `signal`.
inline int PreemptedExitCode(int signal) { return 128 + signal; }

// Asked once per step by every rank: the signal any rank has received (0: none), the same on
// every rank. World 1 reads the flag; more ranks all-reduce it on a stream of their own.
class PreemptionAgreement {
 public:
  static Result<std::unique_ptr<PreemptionAgreement>> Create(Device& device, Communicator& comm);
  ~PreemptionAgreement();
  Result<int> Agree();

 private:
  PreemptionAgreement(Device& device, Communicator& comm) : device_(device), comm_(comm) {}
  Device& device_;
  Communicator& comm_;
  Stream stream_;
  void* flag_ = nullptr;  // one float of device memory
};

}  // namespace strata::cli
