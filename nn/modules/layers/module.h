// Module: a node of a model's tree — named like Hugging Face ("model.layers.3.mlp.down_proj"),
// holding Parameters and child modules — with explicit forward and backward (no autograd tape:
// each module saves what its backward needs, llm.c style) and hooks around both.
//
// Hooks are where ZeRO-3 gathers a module's parameters before it runs and releases them after;
// every module runs them: PreForward → forward → PostForward, PreBackward → backward →
// PostBackward. A decoder layer with activation checkpointing recomputes its forward inside its
// backward, so its submodules' forward hooks fire again there (as in DeepSpeed). A hook error
// stops the module and is returned from its Forward/Backward.
//
// Modules with one input and one output derive from UnaryModule: Forward(ctx, x, y) writes y,
// Backward(ctx, dy, dx) writes dx (overwrites; dx empty = the input gradient is not wanted) and
// adds (+=) the parameter gradients. Both buffers are the caller's; the module keeps views of
// what it saved until its Backward.
//
// Thread safety: a module tree is driven by one thread at a time; work goes onto ctx.stream.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "nn/tensor/parameter.h"
#include "nn/tensor/tensor.h"
#include "offload/device/api/device.h"

namespace strata::nn {

class Module;

// What one forward or backward pass runs with.
struct RunContext {
  Device* device = nullptr;
  Stream stream;
  // False for inference: modules may skip saving activations for backward.
  bool save_for_backward = true;
};

enum class HookPoint { kPreForward, kPostForward, kPreBackward, kPostBackward };
const char* HookPointName(HookPoint point);

// Hooks, called on the driving thread (they may enqueue work on ctx.stream and may block).
class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  virtual Status OnHook(HookPoint point, Module& module, const RunContext& ctx) = 0;
};

class Module {
 public:
  // `local_name` is this module's name inside its parent ("mlp", "3", "" for a root).
  explicit Module(std::string local_name) : local_name_(std::move(local_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Full dotted name ("model.layers.3.mlp"), set by AssignNames on the root; "" for the root.
  const std::string& name() const { return name_; }
  const std::string& local_name() const { return local_name_; }
  // Class name for messages and hooks ("LlamaMLP").
  virtual const char* type_name() const = 0;
  Module* parent() const { return parent_; }
  const std::vector<Module*>& children() const { return children_; }
  // Parameters registered directly on this module, in registration order.
  const std::vector<Parameter*>& own_parameters() const { return params_; }
  // Parameters this module reads but another module owns (a tied LM head uses the embedding's
  // weight). Not part of NamedParameters(); hooks that gather a module's parameters (ZeRO-3)
  // gather these too.
  const std::vector<Parameter*>& external_parameters() const { return external_; }
  // Whether this module's backward reads its parameters' values (a Linear's does; an
  // Embedding's scatter-add does not): a hook that gathers them for backward (ZeRO-3) may skip
  // the gather when it does not.
  virtual bool BackwardReadsParameters() const { return true; }

  // This module's and all descendants' parameters: own first, then each child's in registration
  // order (depth first) — the order of the module's definition, as in PyTorch's
  // named_parameters(). Stable for a given tree.
  std::vector<Parameter*> NamedParameters() const;
  // The parameter called `full_name`, or nullptr.
  Parameter* FindParameter(std::string_view full_name) const;
  // Every module in the tree, pre-order (this one first).
  std::vector<Module*> Modules();

  // Names this tree: each module "prefix.local" (skipping empty parts), each parameter
  // "<module>.<local>", and parameter indices in NamedParameters order. Call on the root.
  void AssignNames(const std::string& prefix = "");

  // Hooks (not owned; must outlive their registration). Added to this module only, or to every
  // module of the subtree. Run in the order added.
  void AddHooks(ModuleHooks* hooks) { hooks_.push_back(hooks); }
  void AddHooksRecursive(ModuleHooks* hooks);
  void RemoveHooksRecursive(ModuleHooks* hooks);

  // Runs this module's hooks for `point` (for module bodies with their own signatures).
  Status RunHooks(HookPoint point, const RunContext& ctx);

 protected:
  // `child` is owned by the caller (usually a member of the derived class) and must outlive this.
  void RegisterModule(Module* child);
  void RegisterParameter(Parameter* p, std::string local_name);
  // Declares that this module uses `p`, owned (registered) by another module of the tree.
  void UseExternalParameter(Parameter* p) { external_.push_back(p); }

 private:
  std::string local_name_;
  std::string name_;
  Module* parent_ = nullptr;
  std::vector<Module*> children_;
  std::vector<Parameter*> params_;
  std::vector<Parameter*> external_;
  std::vector<ModuleHooks*> hooks_;
};

// A module with one input and one output (see the header comment for the buffer contract).
class UnaryModule : public Module {
 public:
  using Module::Module;
  Status Forward(const RunContext& ctx, const Tensor& x, const Tensor& y);
  Status Backward(const RunContext& ctx, const Tensor& dy, const Tensor& dx);

 protected:
  virtual Status DoForward(const RunContext& ctx, const Tensor& x, const Tensor& y) = 0;
  virtual Status DoBackward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) = 0;
};

// Runs body between the PreX and PostX hooks of `m`.
Status WithForwardHooks(Module& m, const RunContext& ctx, const std::function<Status()>& body);
Status WithBackwardHooks(Module& m, const RunContext& ctx, const std::function<Status()>& body);

}  // namespace strata::nn
