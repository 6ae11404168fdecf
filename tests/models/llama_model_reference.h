// A plain double-precision Llama (transformers' LlamaForCausalLM math) for the model tests:
// written from the Hugging Face definitions, sharing no code with models/llama.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/llama/config/llama_config.h"

namespace strata::testing {

using Weights = std::map<std::string, std::vector<double>>;

struct RefOutput {
  std::vector<double> logits;  // [B * T, vocab]
  double loss = 0;
};

inline RefOutput LlamaReference(const llama::LlamaConfig& c, const Weights& w,
                                const std::vector<int32_t>& ids, const std::vector<int32_t>& labels,
                                int64_t B, int64_t T) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, KV = c.num_key_value_heads;
  const int64_t D = C / H, I = c.intermediate_size, V = c.vocab_size, N = B * T;
  auto W = [&](const std::string& n) -> const std::vector<double>& { return w.at(n); };
  // y[N, out] = x[N, in] W^T
  auto linear = [&](const std::vector<double>& x, const std::vector<double>& wt, int64_t in,
                    int64_t out) {
    std::vector<double> y(N * out, 0.0);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t k = 0; k < in; ++k) s += x[i * in + k] * wt[o * in + k];
        y[i * out + o] = s;
      }
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<double>& g) {
    std::vector<double> y(x.size());
    for (int64_t i = 0; i < N; ++i) {
      double ms = 0;
      for (int64_t k = 0; k < C; ++k) ms += x[i * C + k] * x[i * C + k];
      const double r = 1.0 / std::sqrt(ms / C + c.rms_norm_eps);
      for (int64_t k = 0; k < C; ++k) y[i * C + k] = x[i * C + k] * r * g[k];
    }
    return y;
  };
  auto rope = [&](std::vector<double>& x, int64_t heads) {
    for (int64_t i = 0; i < N; ++i) {
      const double pos = static_cast<double>(i % T);
      for (int64_t h = 0; h < heads; ++h) {
        double* v = x.data() + (i * heads + h) * D;
        std::vector<double> out(D);
        for (int64_t j = 0; j < D; ++j) {
          const double angle = pos * std::pow(c.rope_theta, -2.0 * (j % (D / 2)) / D);
          const double rot = j < D / 2 ? -v[j + D / 2] : v[j - D / 2];
          out[j] = v[j] * std::cos(angle) + rot * std::sin(angle);
        }
        for (int64_t j = 0; j < D; ++j) v[j] = out[j];
      }
    }
  };
  const auto& emb = W("model.embed_tokens.weight");
  std::vector<double> x(N * C);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t k = 0; k < C; ++k) x[i * C + k] = emb[ids[i] * C + k];
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto n1 = rmsnorm(x, W(p + "input_layernorm.weight"));
    auto q = linear(n1, W(p + "self_attn.q_proj.weight"), C, H * D);
    auto k = linear(n1, W(p + "self_attn.k_proj.weight"), C, KV * D);
    auto v = linear(n1, W(p + "self_attn.v_proj.weight"), C, KV * D);
    rope(q, H);
    rope(k, KV);
    std::vector<double> att(N * H * D, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / KV);
        for (int64_t i = 0; i < T; ++i) {
          std::vector<double> s(i + 1);
          double mx = -1e300, z = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < D; ++e)
              dot += q[((b * T + i) * H + h) * D + e] * k[((b * T + j) * KV + g) * D + e];
            s[j] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[j]);
          }
          for (double& e : s) z += (e = std::exp(e - mx));
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t e = 0; e < D; ++e)
              att[((b * T + i) * H + h) * D + e] += s[j] / z * v[((b * T + j) * KV + g) * D + e];
        }
      }
    auto o = linear(att, W(p + "self_attn.o_proj.weight"), H * D, C);
    for (int64_t i = 0; i < N * C; ++i) x[i] += o[i];
    auto n2 = rmsnorm(x, W(p + "post_attention_layernorm.weight"));
    auto gate = linear(n2, W(p + "mlp.gate_proj.weight"), C, I);
    auto up = linear(n2, W(p + "mlp.up_proj.weight"), C, I);
    for (int64_t i = 0; i < N * I; ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    auto down = linear(gate, W(p + "mlp.down_proj.weight"), I, C);
    for (int64_t i = 0; i < N * C; ++i) x[i] += down[i];
  }
  auto xf = rmsnorm(x, W("model.norm.weight"));
  RefOutput out;
  out.logits = linear(xf, c.tie_word_embeddings ? emb : W("lm_head.weight"), C, V);
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < N && !labels.empty(); ++i) {
    if (i % T == T - 1 || labels[i + 1] == -100) continue;
    const double* row = out.logits.data() + i * V;
    double mx = -1e300, z = 0;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j < V; ++j) z += std::exp(row[j] - mx);
    sum += mx + std::log(z) - row[labels[i + 1]];
    ++count;
  }
  out.loss = count > 0 ? sum / count : 0.0;
  return out;
}

}  // namespace strata::testing
