// Engine: ZeRO data-parallel training of an nn::CausalLM — DeepSpeed's workflow in C++:
//
//   STRATA_ASSIGN_OR_RETURN(auto engine, Engine::Initialize(model, config, comm, device, init));
//   for (...) {
//     STRATA_RETURN_IF_ERROR(engine->Forward(micro_batch));   // model_engine(batch)
//     STRATA_RETURN_IF_ERROR(engine->Backward());             // model_engine.backward(loss)
//     STRATA_RETURN_IF_ERROR(engine->Step());                 // model_engine.step()
//   }
//
// Model-agnostic: it sees the module tree and its Parameters, never a model family. The model
// must be built without storage of its own (e.g. LlamaModelOptions::allocate_parameters =
// false): the engine places every parameter and gradient.
//
// What lives where (world = data-parallel ranks; the partition is engine/base/partition.h's):
//   stage 0   every rank: full compute params + fp32 grads on the device, the whole fp32 master
//             and optimizer state; gradients all-reduced at the boundary.
//   stage 1   as 0, but master + optimizer state are this rank's partition only; updated
//             partitions are all-gathered into the full params.
//   stage 2   as 1, and gradients are reduce-scattered into the fp32 partition after each
//             micro-batch's backward (the full gradient slots are zeroed after).
//   offload_optimizer.device = cpu: master + moments + fp32 gradient partition in pinned CPU
//             memory; the partition's gradients go D2H once per step (stage 1; stages 2-3 add
//             each reduced shard straight into the pinned partition, with no device gradient
//             partition: engine/zero/grad/grad_reducer.h), CPU Adam updates it, and the
//             compute-dtype result goes H2D once.
//   stage 3   as 2, but between uses only this rank's compute-dtype shard of each parameter
//             lives (device, or pinned CPU with offload_param.device = cpu); module hooks
//             (engine/zero/hooks/zero3_hooks.h) gather a module's parameters around its
//             forward/backward and release them after, and its gradient slots exist only until
//             reduced.
//   overlap_comm (stages 2-3): reduce-scatters run on a comm stream, bucketed by
//             reduce_bucket_size (engine/zero/grad/grad_reducer.h); bitwise the same results.
//   offload_optimizer.device = nvme (stages 1-3): master + moments on NVMe per sub-group
//             (engine/nvme/optimizer_nvme.h), stepped through the pipelined swapper; the fp32
//             gradient partition in pinned CPU memory, as for cpu.
//   offload_param.device = nvme (stage 3, with offload_optimizer cpu or nvme): each parameter
//             shard on NVMe through swap/ParamSwapper (engine/zero/store/param_store.h), read into
//             pinned swap buffers when gathered; the updated shards are staged in pinned CPU memory
//             and written back after the step.
//
// The step (DeepSpeed's order): reduce; fp16 overflow check (the step is skipped and the loss
// scale backs off); global L2 norm of the averaged, unscaled gradients; clip factor as
// DeepSpeed's unscale_and_clip_grads; optimizer per sub-group with the LR of the schedule;
// write back; zero gradients. Gradient accumulation: Backward scales d(loss) by
// loss_scale / gradient_accumulation_steps, and Step only steps at the boundary.
//
// Thread safety: one thread drives an engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/base/partition.h"
#include "engine/base/step_breakdown.h"
#include "engine/comm/communicator.h"
#include "engine/config/config.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer_state.h"
#include "nn/modules/lm/causal_lm.h"
#include "offload/device/api/device.h"
#include "offload/tier_budget.h"

namespace strata {

// Gives a parameter's initial values, all numel() of them, as fp32 (random init or a loaded
// checkpoint). Called once per parameter at Initialize, on every rank, which must all produce the
// same values (a seed, or the same file).
using ParamInitFn = std::function<Status(const nn::Parameter& p, std::span<float> out)>;

// Where Initialize is in writing the initial values (a large model's NVMe state takes minutes).
struct InitProgress {
  int64_t params_done = 0, params_total = 0;
  uint64_t elements_done = 0, elements_total = 0;
  double seconds = 0;  // since the values began
};
using InitProgressFn = std::function<void(const InitProgress&)>;

struct EngineInit {
  ParamInitFn init_param;
  // Accounting (and limits) for the CPU tier; null: the engine's own, unlimited.
  TierBudget* budget = nullptr;
  // Called while the initial values are written, at most once per progress_interval_s and only
  // once that long has passed (a small model's Initialize stays silent), then once at the end if
  // it was called before. Null: no progress.
  InitProgressFn progress;
  double progress_interval_s = 2.0;
};

struct EngineStats {
  int64_t micro_steps = 0;    // Backward calls
  int64_t global_steps = 0;   // boundaries reached (applied + skipped)
  int64_t skipped_steps = 0;  // fp16 overflow
  double loss_scale = 1.0;
  double last_grad_norm = 0.0;  // of the averaged, unscaled gradients, before clipping
  double last_lr = 0.0;
  // Bytes per tier this engine holds now (device: params, grads, shards, buffers, the optimizer
  // state on the device tier, and at stage 3 the parameters gathered and the gradient slots live
  // at the moment; cpu: optimizer state, staging, offloaded parameter shards). Updated after
  // Initialize, Forward, Backward and Step. device_peak_bytes: the most the engine held at once
  // (stage 3's gathered parameters and slots at their peak; activations are the model's).
  uint64_t device_bytes = 0;
  uint64_t cpu_bytes = 0;
  uint64_t device_peak_bytes = 0;
  // Stage 3's ParamCoordinator (engine/zero/hooks/param_coordinator.h), since Initialize: modules
  // that found their parameters gathered ahead (or kept) / had to gather them, bytes gathered
  // ahead, trace invalidations, shard bytes whose NVMe read it started ahead; and the most
  // non-persistent parameter elements gathered at once.
  uint64_t prefetch_hits = 0, prefetch_misses = 0, prefetch_bytes = 0, trace_invalidations = 0;
  uint64_t prefetch_read_bytes = 0;
  uint64_t peak_live_param_numel = 0;
};

class Engine {
 public:
  // Places the model's parameters, builds the optimizer state and initialises both. Errors:
  // InvalidArgument for a config it cannot honour with this model (naming the key),
  // Unimplemented for placements not built yet,
  // OutOfMemory naming the tier (the memory plan of engine/plan/memory_plan.h is checked against
  // the device's free memory and the CPU budget first: the error carries the per-tier table).
  static Result<std::unique_ptr<Engine>> Initialize(nn::CausalLM& model, const Config& config,
                                                    Communicator& comm, Device& device,
                                                    const EngineInit& init);
  ~Engine();

  // One micro-batch forward (labels required for training).
  Status Forward(const nn::TokenBatch& micro_batch);
  // Backward of the last Forward; gradients accumulate until the boundary.
  Status Backward();
  // At the gradient-accumulation boundary: the optimizer step. Otherwise nothing.
  Status Step();
  bool IsGradientAccumulationBoundary() const;
  // The last Forward's loss (synchronizes the compute stream).
  Result<float> Loss();
  // Waits for the I/O a step leaves in flight (the overlapped step's NVMe optimizer writes, the
  // stage-3 parameter store's write-back) and reports the first failure; the next step would
  // wait for them anyway. For benchmarks that must not let one step's writes run into what they
  // time next, and for callers about to hand the disk to something else.
  Status Synchronize();

  const EngineStats& stats() const { return stats_; }
  // The config as the engine runs it: "auto" sizing keys resolved for this model
  // (engine/config/auto_sizes.h; AutoSizesText lists them with their reasons).
  const Config& config() const { return config_; }
  const PartitionLayout& layout() const { return layout_; }
  int64_t applied_steps() const { return stats_.global_steps - stats_.skipped_steps; }
  DType compute_dtype() const { return compute_dtype_; }

  // The full fp32 master value of parameter `index` (gathered from every rank's partition when
  // partitioned); all ranks must call it together. For tests and export.
  Status GatherMasterParameter(size_t index, std::span<float> out);

  // Checkpoints (engine/checkpoint/checkpoint.h has the on-disk format). All ranks call together.
  // SaveCheckpoint writes this rank's shard (master params, optimizer moments, loss scaler,
  // step counters) and, on rank 0, the manifest and `client_state` (a JSON object the caller
  // owns: data position, RNG); each file goes to a temporary name, is fsynced and renamed, and
  // `latest` is replaced last, so a crash at any point leaves the previous checkpoint loadable.
  // An empty tag means "global_step<N>" as DeepSpeed names it.
  Status SaveCheckpoint(const std::string& dir, const std::string& tag = "",
                        const std::string& client_state_json = "{}");
  // Loads `tag` (empty: the one `latest` names) into this engine, re-partitioning when the
  // checkpoint was written by a different world size; returns the client state JSON.
  Result<std::string> LoadCheckpoint(const std::string& dir, const std::string& tag = "");

  // Rewrites every compute-dtype parameter copy from the fp32 master (after a load), rounded
  // as the optimizer's write-back rounds. All ranks call together.
  Status SyncParametersFromMaster();

  // Where the last optimizer step's time went (forward and backward of its micro-batches, the
  // step and its parts: copies, collectives, NVMe waits, Adam), engine/base/step_breakdown.h.
  const StepBreakdown& last_breakdown() const;
  // Writes the spans recorded so far to strata.trace_path (Ok, nothing written, when unset).
  Status FlushTrace();

  // strata.overlap_step (engine/overlap/step_overlap.h): optimizer sub-groups updated during the
  // boundary backward so far (cumulative, including updates later rolled back; may be read from any
  // thread while a backward runs), and of those the ones finished before Backward returned.
  int64_t overlapped_sub_groups() const;
  int64_t early_sub_groups() const;
  // Sub-groups whose stage-3 parameters (offload_param nvme) the overlapped step wrote back
  // before the step's own write-back (cumulative).
  int64_t early_param_write_backs() const;
  // strata.deferred_updates: sub-groups whose update ran during the next forward (cumulative).
  int64_t deferred_sub_groups() const;

 private:
  Engine(nn::CausalLM& model, const Config& config, Communicator& comm, Device& device);
  Status Place(const EngineInit& init);
  Status InitializeValues(const EngineInit& init);
  Status ReduceMicroBatchGradients();  // stage 2
  Status ReduceBoundaryGradients();    // stages 0-1
  Status ApplyStep();
  // strata.overlap_step (engine_overlap.cc): made at Place; armed before the boundary backward.
  Status PlaceStepOverlap();
  Status BeginOverlappedBackward();
  Status BeginStepReadAhead();  // NVMe: from the boundary micro-batch's Forward
  // strata.deferred_updates: waits for the updates the last step deferred into this forward,
  // then zeroes the host gradients they read. Everything that touches the optimizer state, the
  // host gradients or the shards calls it first; a no-op when nothing is deferred.
  Status SettleDeferred();
  Status ZeroGradients();
  Status ZeroHostGradients();    // the host / NVMe part the host optimizer steps on
  Status ZeroDeviceGradients();  // the device gradient partition and stage 3's full slots
  // Writes the updated parameters back (stage 3: into the store, skipping the sub-groups marked in
  // `written`; stages 1-2: H2D and all-gather).
  Status WriteBackParameters(const std::vector<char>& written);
  // Elements of the fp32 master partition to / from host memory, whatever holds it (the
  // optimizer state on any tier, or NVMe).
  Status ReadMaster(size_t flat_begin, std::span<float> out);
  Status WriteMaster(size_t flat_begin, std::span<const float> in);
  // Stage 3: this rank's compute-dtype shards rewritten from the master, one sub-group at a time.
  Status WriteShardsFromMasterState();

  struct Impl;
  nn::CausalLM& model_;
  const Config config_;
  Communicator& comm_;
  Device& device_;
  std::vector<nn::Parameter*> params_;
  PartitionLayout layout_;
  DType compute_dtype_ = DType::kFloat32;
  LossScaler scaler_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<OptimizerState> opt_;
  std::unique_ptr<Impl> impl_;
  EngineStats stats_;
};

}  // namespace strata
