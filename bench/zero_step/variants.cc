#include "bench/zero_step/variants.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <utility>

#include "bench/zero_step/timed_comm.h"
#include "cpu_adam/cpu_optimizer.h"
#include "engine/comm/registry.h"
#include "engine/config/config.h"
#include "models/llama/llama_init.h"
#include "models/llama/model/llama_model.h"
#include "nn/ops/op_registry.h"
#include "nn/tensor/parameter.h"
#include "offload/device/api/kernels.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double OpSeconds() { return static_cast<double>(nn::GetOpTimes().total_ns()) * 1e-9; }

// The engine's alignment of parameters in its flat buffers (engine.cc), so the bare loop's
// buffers have the same shape.
constexpr size_t kAlignNumel = 64;

Result<std::unique_ptr<llama::LlamaForCausalLM>> MakeUnplacedModel(Device& device,
                                                                   const llama::LlamaConfig& c,
                                                                   DType dtype) {
  llama::LlamaModelOptions o;
  o.dtype = dtype;
  o.allocate_parameters = false;
  o.allocate_grads = false;
  return llama::LlamaForCausalLM::Create(c, &device, o);
}

// forward, backward, then AdamW on fp32 master weights in device memory (host-addressable on
// HostDevice, so the CPU optimizer runs on it in place, as the engine's device tier does). With
// fp32 parameters the master is the parameter buffer itself; with bf16/fp16 the optimizer
// writes the rounded copy into the parameter buffer in the same pass.
class BareLoop final : public Variant {
 public:
  BareLoop(Device& device, const BareOptions& o, CpuOptimizer opt)
      : device_(device), options_(o), opt_(std::move(opt)) {}
  ~BareLoop() override {
    if (stream_.valid()) device_.DestroyStream(stream_).IgnoreError();
    for (void* p : owned_) device_.Free(p).IgnoreError();
  }

  Status Init() {
    STRATA_ASSIGN_OR_RETURN(model_, MakeUnplacedModel(device_, options_.model, options_.dtype));
    STRATA_ASSIGN_OR_RETURN(stream_, device_.CreateStream());
    params_ = model_->NamedParameters();
    std::vector<size_t> offsets;
    for (nn::Parameter* p : params_) {
      offsets.push_back(numel_);
      numel_ += (static_cast<size_t>(p->numel()) + kAlignNumel - 1) / kAlignNumel * kAlignNumel;
    }
    const size_t cbytes = DTypeBytes(options_.dtype);
    const bool separate_master = options_.dtype != DType::kFloat32;
    STRATA_ASSIGN_OR_RETURN(param_buf_, Alloc(numel_ * cbytes));
    STRATA_ASSIGN_OR_RETURN(void* grads, Alloc(numel_ * sizeof(float)));
    STRATA_ASSIGN_OR_RETURN(void* m, Alloc(numel_ * sizeof(float)));
    STRATA_ASSIGN_OR_RETURN(void* v, Alloc(numel_ * sizeof(float)));
    grads_ = static_cast<float*>(grads);
    m_ = static_cast<float*>(m);
    v_ = static_cast<float*>(v);
    if (separate_master) {
      STRATA_ASSIGN_OR_RETURN(void* master, Alloc(numel_ * sizeof(float)));
      master_ = static_cast<float*>(master);
    } else {
      master_ = static_cast<float*>(param_buf_);
    }
    // Zero everything, padding included (it stays zero under AdamW with zero gradients).
    for (void* p : {param_buf_, grads, m, v, static_cast<void*>(master_)}) {
      STRATA_RETURN_IF_ERROR(LaunchFill(stream_, p, DType::kFloat32, 0.0f,
                                        p == param_buf_ ? numel_ * cbytes / 4 : numel_));
    }
    STRATA_RETURN_IF_ERROR(stream_.Synchronize());
    const ParamInitFn init = BenchInit(options_.seed);
    std::vector<float> values;
    for (size_t i = 0; i < params_.size(); ++i) {
      nn::Parameter& p = *params_[i];
      p.set_data(static_cast<uint8_t*>(param_buf_) + offsets[i] * cbytes);
      p.set_grad(grads_ + offsets[i], DType::kFloat32);
      values.assign(static_cast<size_t>(p.numel()), 0.0f);
      STRATA_RETURN_IF_ERROR(init(p, values));
      std::memcpy(master_ + offsets[i], values.data(), values.size() * sizeof(float));
      if (separate_master) {
        STRATA_RETURN_IF_ERROR(
            nn::UploadParameter(stream_, p, values.data(), DType::kFloat32, values.size()));
      }
    }
    offsets_ = std::move(offsets);
    return stream_.Synchronize();
  }

  const std::string& name() const override { return name_; }

  Result<StepTimes> RunStep(const nn::TokenBatch& batch) override {
    StepTimes t;
    const nn::RunContext ctx{&device_, stream_, true};
    const auto t0 = Clock::now();
    const double ops0 = OpSeconds();
    STRATA_RETURN_IF_ERROR(model_->Forward(ctx, batch));
    STRATA_RETURN_IF_ERROR(model_->Backward(ctx, 1.0f));
    STRATA_ASSIGN_OR_RETURN(t.loss, model_->ReadLoss(ctx));  // synchronizes
    t.forward_backward_s = Since(t0);
    t.ops_s = OpSeconds() - ops0;

    const auto t1 = Clock::now();
    StepTensors st;
    st.numel = numel_;
    st.params = master_;
    st.grads = grads_;
    st.grad_dtype = DType::kFloat32;
    st.exp_avg = m_;
    st.exp_avg_sq = v_;
    if (options_.dtype != DType::kFloat32) {
      st.param_copy = param_buf_;
      st.param_copy_dtype = options_.dtype;
    }
    STRATA_RETURN_IF_ERROR(opt_.StepAt(options_.adam, ++step_, st));
    t.adam_s = Since(t1);
    STRATA_RETURN_IF_ERROR(LaunchFill(stream_, grads_, DType::kFloat32, 0.0f, numel_));
    STRATA_RETURN_IF_ERROR(stream_.Synchronize());
    t.step_s = Since(t1);
    t.total_s = Since(t0);
    return t;
  }

  Result<std::vector<std::vector<float>>> MasterParameters() override {
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      const float* src = master_ + offsets_[i];
      out.emplace_back(src, src + params_[i]->numel());
    }
    return out;
  }

 private:
  Result<void*> Alloc(size_t bytes) {
    STRATA_ASSIGN_OR_RETURN(void* p, device_.Allocate(std::max<size_t>(bytes, 256)));
    owned_.push_back(p);
    return p;
  }

  Device& device_;
  BareOptions options_;
  CpuOptimizer opt_;
  std::string name_ = "bare";
  std::unique_ptr<llama::LlamaForCausalLM> model_;
  Stream stream_;
  std::vector<nn::Parameter*> params_;
  std::vector<size_t> offsets_;
  std::vector<void*> owned_;
  size_t numel_ = 0;
  void* param_buf_ = nullptr;
  float* master_ = nullptr;
  float* grads_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int64_t step_ = 0;
};

class EngineVariant final : public Variant {
 public:
  EngineVariant(std::string name, std::unique_ptr<Communicator> comm)
      : name_(std::move(name)), comm_(std::move(comm)), timed_(comm_.get()) {}
  ~EngineVariant() override {
    engine_.reset();  // before the model and communicator it uses
  }

  Status Init(Device& device, const EngineVariantOptions& o) {
    STRATA_ASSIGN_OR_RETURN(model_, MakeUnplacedModel(device, o.model, o.dtype));
    RunContext run;
    run.world_size = 1;
    STRATA_ASSIGN_OR_RETURN(Config config, LoadConfigText(o.config_json, name_, run));
    EngineInit init;
    init.init_param = BenchInit(o.seed);
    STRATA_ASSIGN_OR_RETURN(engine_, Engine::Initialize(*model_, config, timed_, device, init));
    return Status::Ok();
  }

  const std::string& name() const override { return name_; }

  Result<StepTimes> RunStep(const nn::TokenBatch& batch) override {
    StepTimes t;
    timed_.Reset();
    const auto t0 = Clock::now();
    const double ops0 = OpSeconds();
    STRATA_RETURN_IF_ERROR(engine_->Forward(batch));
    STRATA_RETURN_IF_ERROR(engine_->Backward());
    STRATA_ASSIGN_OR_RETURN(t.loss, engine_->Loss());  // synchronizes the compute stream
    t.forward_backward_s = Since(t0);
    t.ops_s = OpSeconds() - ops0;
    const auto t1 = Clock::now();
    STRATA_RETURN_IF_ERROR(engine_->Step());  // returns with its streams drained
    t.step_s = Since(t1);
    t.total_s = Since(t0);
    t.collectives_s = timed_.busy_s();
    t.collective_calls = timed_.calls();
    return t;
  }

  Result<std::vector<std::vector<float>>> MasterParameters() override {
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < engine_->layout().slices().size(); ++i) {
      std::vector<float> v(engine_->layout().slices()[i].numel);
      STRATA_RETURN_IF_ERROR(engine_->GatherMasterParameter(i, v));
      out.push_back(std::move(v));
    }
    return out;
  }

 private:
  std::string name_;
  std::unique_ptr<Communicator> comm_;
  TimedCommunicator timed_;
  std::unique_ptr<llama::LlamaForCausalLM> model_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace

ParamInitFn BenchInit(uint64_t seed) { return llama::RandomInit(seed); }

Result<std::unique_ptr<Variant>> CreateBareLoop(Device& device, const BareOptions& options) {
  if (!device.caps().host_accessible_memory) {
    return UnimplementedError(
        "zero_step: the bare loop runs CPU AdamW on device memory in place, "
        "which needs host-addressable device memory (HostDevice)");
  }
  STRATA_ASSIGN_OR_RETURN(CpuOptimizer opt, CpuOptimizer::Create(OptimizerKind::kAdam));
  auto v = std::make_unique<BareLoop>(device, options, std::move(opt));
  STRATA_RETURN_IF_ERROR(v->Init().WithContext("bare loop"));
  return std::unique_ptr<Variant>(std::move(v));
}

Result<std::unique_ptr<Variant>> CreateEngineVariant(Device& device,
                                                     const EngineVariantOptions& options) {
  CommOptions co;
  co.backend = CommBackend::kLocal;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateCommunicator(co));
  auto v = std::make_unique<EngineVariant>(options.name, std::move(comm));
  STRATA_RETURN_IF_ERROR(v->Init(device, options));
  return std::unique_ptr<Variant>(std::move(v));
}

}  // namespace strata::bench
