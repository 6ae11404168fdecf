// ModuleList: a container module whose children are named by position ("layers.0", "layers.1"),
// like torch.nn.ModuleList. It has no parameters and no forward of its own.
#pragma once

#include <string>

#include "nn/modules/layers/module.h"

namespace strata::nn {

class ModuleList final : public Module {
 public:
  using Module::Module;
  const char* type_name() const override { return "ModuleList"; }
  // `m` must have been constructed with local name std::to_string(size()).
  void Append(Module* m) { RegisterModule(m); }
  size_t size() const { return children().size(); }
};

}  // namespace strata::nn
