#include "engine/config/deepspeed/batch_config.h"

#include <optional>
#include <string>

namespace strata::internal {
namespace {

constexpr const char* kTrain = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccum = "gradient_accumulation_steps";

// One batch key: its value from the file, or from the run when "auto" / absent.
struct Slot {
  const char* key;
  std::optional<int64_t> value;
  bool is_auto = false;
  bool invalid = false;
};

void ReadSlot(const Section& top, std::optional<int64_t> run_value, const char* run_flag, Slot* s) {
  int64_t v = 0;
  Got g = top.Int(s->key, &v, 1, Section::kMaxInt, /*auto_ok=*/true);
  if (g == Got::kValue) {
    s->value = v;
  } else if (g == Got::kInvalid) {
    s->invalid = true;
  } else {
    s->is_auto = g == Got::kAuto;
    if (run_value) {
      s->value = *run_value;
      top.ctx()->SetOrigin(s->key, s->is_auto ? OriginKind::kAuto : OriginKind::kRun,
                           std::string(s->is_auto ? "from the run, " : "") + run_flag + " " +
                               std::to_string(*run_value));
    }
  }
}

std::string Num(int64_t v) { return std::to_string(v); }

}  // namespace

void ReadBatch(const Section& top, BatchConfig* out) {
  ConfigContext* ctx = top.ctx();
  const RunContext& run = ctx->run();
  const int64_t w = run.world_size;
  out->world_size = w;
  Slot tb{kTrain, std::nullopt};
  Slot mb{kMicro, std::nullopt};
  Slot ga{kAccum, std::nullopt};
  ReadSlot(top, std::nullopt, "", &tb);
  ReadSlot(top, run.micro_batch_per_gpu, "--micro-batch", &mb);
  ReadSlot(top, run.gradient_accumulation_steps, "--grad-accum", &ga);
  if (tb.invalid || mb.invalid || ga.invalid) return;  // already reported

  // "auto" with nothing from the run and nothing else to derive it from: Strata's default micro
  // batch, as the Trainer's arguments would give. With train_batch_size given, DeepSpeed's
  // derivation below decides instead.
  auto explicit_count = [&] {
    return (tb.value ? 1 : 0) + (mb.value ? 1 : 0) + (ga.value ? 1 : 0);
  };
  if ((tb.is_auto || mb.is_auto || ga.is_auto) && !tb.value && !mb.value) {
    mb.value = kDefaultMicroBatchPerGpu;
    ctx->SetOrigin(kMicro, OriginKind::kAuto,
                   "Strata's default " + Num(kDefaultMicroBatchPerGpu) +
                       " (strata train --micro-batch sets it)");
  }
  if (explicit_count() == 0 || (explicit_count() == 1 && ga.value)) {
    ctx->Error(kTrain, std::string("no batch size: set ") + kTrain + " or " + kMicro +
                           " (or pass --micro-batch); " + kAccum + " alone does not determine it");
    return;
  }

  auto derived = [&](const char* key, const std::string& how) {
    ctx->SetOrigin(key, OriginKind::kDerived, how);
  };
  const std::string ws = " × world size " + Num(w);
  if (tb.value && mb.value && ga.value) {
    if (*tb.value != *mb.value * *ga.value * w) {
      ctx->Error(kTrain, kTrain + std::string(" ") + Num(*tb.value) + " != " + kMicro + " " +
                             Num(*mb.value) + " × " + kAccum + " " + Num(*ga.value) + ws +
                             " (= " + Num(*mb.value * *ga.value * w) + ")");
      return;
    }
  } else if (tb.value && mb.value) {
    if (*tb.value % (*mb.value * w) != 0) {
      ctx->Error(kTrain, kTrain + std::string(" ") + Num(*tb.value) + " is not a multiple of " +
                             kMicro + " " + Num(*mb.value) + ws + " (= " + Num(*mb.value * w) +
                             "), so " + kAccum + " cannot be derived");
      return;
    }
    ga.value = *tb.value / (*mb.value * w);
    derived(kAccum, Num(*tb.value) + " / (" + Num(*mb.value) + " × world " + Num(w) + ")");
  } else if (tb.value && ga.value) {
    if (*tb.value % (*ga.value * w) != 0) {
      ctx->Error(kTrain, kTrain + std::string(" ") + Num(*tb.value) + " is not a multiple of " +
                             kAccum + " " + Num(*ga.value) + ws + " (= " + Num(*ga.value * w) +
                             "), so " + kMicro + " cannot be derived");
      return;
    }
    mb.value = *tb.value / (*ga.value * w);
    derived(kMicro, Num(*tb.value) + " / (" + Num(*ga.value) + " × world " + Num(w) + ")");
  } else if (mb.value && ga.value) {
    tb.value = *mb.value * *ga.value * w;
    derived(kTrain, Num(*mb.value) + " × " + Num(*ga.value) + " × world " + Num(w));
  } else if (tb.value) {
    if (*tb.value % w != 0) {
      ctx->Error(kTrain, kTrain + std::string(" ") + Num(*tb.value) +
                             " is not a multiple of world size " + Num(w));
      return;
    }
    ga.value = 1;
    mb.value = *tb.value / w;
    derived(kAccum, "1 (only train_batch_size is given)");
    derived(kMicro, Num(*tb.value) + " / world " + Num(w));
  } else {  // only the micro batch
    ga.value = 1;
    tb.value = *mb.value * w;
    derived(kAccum, "1 (only train_micro_batch_size_per_gpu is given)");
    derived(kTrain, Num(*mb.value) + " × world " + Num(w));
  }
  out->train_batch_size = *tb.value;
  out->micro_batch_per_gpu = *mb.value;
  out->gradient_accumulation_steps = *ga.value;
}

void ReadTrainingScalars(const Section& top, TrainingConfig* out) {
  if (top.Double("gradient_clipping", &out->gradient_clipping, 0.0, Section::kInf,
                 /*auto_ok=*/true) == Got::kAuto) {
    top.ctx()->SetOrigin("gradient_clipping", OriginKind::kAuto,
                         "DeepSpeed's default 1.0 (the Trainer's max_grad_norm default)");
  }
  top.Bool("prescale_gradients", &out->prescale_gradients);
  top.Double("gradient_predivide_factor", &out->gradient_predivide_factor, 1e-30);
  top.Int("steps_per_print", &out->steps_per_print, 1);
  top.Bool("wall_clock_breakdown", &out->wall_clock_breakdown);
}

}  // namespace strata::internal
