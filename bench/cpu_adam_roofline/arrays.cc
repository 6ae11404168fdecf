#include "bench/cpu_adam_roofline/arrays.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "bench/cpu_adam_roofline/measure.h"
#include "cpu_adam/simd/dtype.h"

namespace strata::bench {

AlignedBuffer Alloc(size_t bytes, bool huge) {
  AlignedBufferOptions o;
  o.huge_pages = huge;
  o.populate = true;
  Result<AlignedBuffer> b = AlignedBuffer::Allocate(bytes, o);
  if (!b.ok()) {
    std::fprintf(stderr, "cpu_adam_roofline: %s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(b).value();
}

Arrays::Arrays(size_t n, bool with_half) {
  for (int k = 0; k < 4; ++k) owned.push_back(Alloc(n * 4, true));
  for (int k = 0; k < 4; ++k) f[k] = static_cast<float*>(owned[k].data());
  if (with_half) {
    owned.push_back(Alloc(n * 2, true));
    owned.push_back(Alloc(n * 2, true));
    g16 = static_cast<uint16_t*>(owned[4].data());
    c16 = static_cast<uint16_t*>(owned[5].data());
  }
  Fill(n, with_half);
}
Arrays::Arrays(size_t n, const AlignedBuffer& shared, size_t stagger_bytes) {
  for (int k = 0; k < 4; ++k) {
    f[k] = reinterpret_cast<float*>(shared.bytes() + k * (n * 4 + stagger_bytes));
  }
}
void Arrays::Fill(size_t n, bool with_half) {
  RunSplit(2, false, n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const float r = static_cast<float>((i * 2654435761u) & 0xFFFFFF) * (1.0f / (1 << 24));
      P()[i] = r - 0.5f;
      G()[i] = (0.5f - r) * 1e-2f;
      M()[i] = 0;
      V()[i] = 1e-4f;
      if (with_half) G16()[i] = FloatToBf16(G()[i]);
    }
  });
}

size_t Arrays::CommonAlignment() const {
  size_t a = size_t{1} << 30;
  for (int i = 1; i < 4; ++i) {
    const auto d =
        static_cast<size_t>(reinterpret_cast<uintptr_t>(f[i]) - reinterpret_cast<uintptr_t>(f[0]));
    while (a > 1 && d % a != 0) a /= 2;
  }
  return a;
}

}  // namespace strata::bench
