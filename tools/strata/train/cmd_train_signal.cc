// strata train's SIGTERM / SIGINT handling (cmd_train_signal.h).
#include "tools/strata/train/cmd_train_signal.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

namespace strata::cli {
namespace {

volatile sig_atomic_t g_signal = 0;

void OnSignal(int sig) {
  if (g_signal != 0) _exit(PreemptedExitCode(g_signal));  // the second one: at once
  g_signal = sig;
  // One line; write(2) is async-signal-safe, printf is not.
  const char msg[] =
      "strata train: signal received: finishing this step, then saving (with --save) and "
      "exiting; a second signal exits at once\n";
  [[maybe_unused]] const ssize_t n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
}

}  // namespace

void InstallPreemptionHandlers() {
  struct sigaction sa {};
  sa.sa_handler = &OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

Result<std::unique_ptr<PreemptionAgreement>> PreemptionAgreement::Create(Device& device,
                                                                         Communicator& comm) {
  std::unique_ptr<PreemptionAgreement> a(new PreemptionAgreement(device, comm));
  if (comm.world_size() == 1) return a;
  STRATA_ASSIGN_OR_RETURN(a->stream_, device.CreateStream());
  STRATA_ASSIGN_OR_RETURN(a->flag_, device.Allocate(sizeof(float)));
  return a;
}

PreemptionAgreement::~PreemptionAgreement() {
  if (flag_ != nullptr) device_.Free(flag_).IgnoreError();
  if (stream_.valid()) device_.DestroyStream(stream_).IgnoreError();
}

Result<int> PreemptionAgreement::Agree() {
  const int local = g_signal;
  if (comm_.world_size() == 1) return local;
  float v = static_cast<float>(local);
  STRATA_RETURN_IF_ERROR(stream_.CopyAsync(flag_, &v, sizeof(float), CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      comm_.AllReduce(stream_, flag_, flag_, 1, DType::kFloat32, ReduceOp::kMax, nullptr)
          .WithContext("agreeing on a stop signal"));
  STRATA_RETURN_IF_ERROR(stream_.CopyAsync(&v, flag_, sizeof(float), CopyKind::kDeviceToHost));
  STRATA_RETURN_IF_ERROR(stream_.Synchronize());
  return std::max(local, static_cast<int>(v));
}

}  // namespace strata::cli
