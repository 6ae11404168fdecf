#include "nn/modules/layers/module.h"

#include <algorithm>

namespace strata::nn {

const char* HookPointName(HookPoint point) {
  switch (point) {
    case HookPoint::kPreForward:
      return "pre_forward";
    case HookPoint::kPostForward:
      return "post_forward";
    case HookPoint::kPreBackward:
      return "pre_backward";
    case HookPoint::kPostBackward:
      return "post_backward";
  }
  return "?";
}

void Module::RegisterModule(Module* child) {
  child->parent_ = this;
  children_.push_back(child);
}

void Module::RegisterParameter(Parameter* p, std::string local_name) {
  p->name_ = std::move(local_name);
  params_.push_back(p);
}

std::vector<Parameter*> Module::NamedParameters() const {
  std::vector<Parameter*> out(params_.begin(), params_.end());
  for (const Module* c : children_) {
    std::vector<Parameter*> sub = c->NamedParameters();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

Parameter* Module::FindParameter(std::string_view full_name) const {
  for (Parameter* p : NamedParameters()) {
    if (p->name() == full_name) return p;
  }
  return nullptr;
}

std::vector<Module*> Module::Modules() {
  std::vector<Module*> out{this};
  for (Module* c : children_) {
    std::vector<Module*> sub = c->Modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

namespace {
std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "." + b;
}
}  // namespace

void Module::AssignNames(const std::string& prefix) {
  name_ = prefix;
  for (Parameter* p : params_) {
    const size_t dot = p->name_.rfind('.');
    const std::string local = dot == std::string::npos ? p->name_ : p->name_.substr(dot + 1);
    p->name_ = Join(name_, local);
  }
  for (Module* c : children_) c->AssignNames(Join(name_, c->local_name_));
  if (parent_ == nullptr) {
    int64_t i = 0;
    for (Parameter* p : NamedParameters()) p->index_ = i++;
  }
}

void Module::AddHooksRecursive(ModuleHooks* hooks) {
  for (Module* m : Modules()) m->AddHooks(hooks);
}

void Module::RemoveHooksRecursive(ModuleHooks* hooks) {
  for (Module* m : Modules()) {
    m->hooks_.erase(std::remove(m->hooks_.begin(), m->hooks_.end(), hooks), m->hooks_.end());
  }
}

Status Module::RunHooks(HookPoint point, const RunContext& ctx) {
  for (ModuleHooks* h : hooks_) {
    Status s = h->OnHook(point, *this, ctx);
    if (!s.ok()) {
      return s.WithContext(std::string(HookPointName(point)) + " hook of " +
                           (name_.empty() ? std::string(type_name()) : name_));
    }
  }
  return Status::Ok();
}

Status WithForwardHooks(Module& m, const RunContext& ctx, const std::function<Status()>& body) {
  STRATA_RETURN_IF_ERROR(m.RunHooks(HookPoint::kPreForward, ctx));
  STRATA_RETURN_IF_ERROR(body());
  return m.RunHooks(HookPoint::kPostForward, ctx);
}

Status WithBackwardHooks(Module& m, const RunContext& ctx, const std::function<Status()>& body) {
  STRATA_RETURN_IF_ERROR(m.RunHooks(HookPoint::kPreBackward, ctx));
  STRATA_RETURN_IF_ERROR(body());
  return m.RunHooks(HookPoint::kPostBackward, ctx);
}

Status UnaryModule::Forward(const RunContext& ctx, const Tensor& x, const Tensor& y) {
  return WithForwardHooks(*this, ctx, [&] { return DoForward(ctx, x, y); });
}

Status UnaryModule::Backward(const RunContext& ctx, const Tensor& dy, const Tensor& dx) {
  return WithBackwardHooks(*this, ctx, [&] { return DoBackward(ctx, dy, dx); });
}

}  // namespace strata::nn
