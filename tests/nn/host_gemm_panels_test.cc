// The host GEMM cut into panels of C run as oneTBB tasks (Note [GEMM panels] in
// nn/host/host_gemm.cc): shapes that are cut by rows and by columns, every transpose, padded
// leading dimensions, alpha and beta, against a double-precision product; and the same bits
// whatever the number of threads (the cut depends on the shape and the machine's CPU count).
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "nn/host/host_ops.h"
#include "tests/support/test_util.h"

namespace strata::nn {
namespace {

struct Shape {
  int64_t m, n, k;
};

struct Operands {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, c0;
};

Operands Make(const Shape& s, bool ta, bool tb, std::mt19937_64& rng) {
  Operands o;
  o.ta = ta, o.tb = tb, o.m = s.m, o.n = s.n, o.k = s.k;
  const int64_t pad = 1 + static_cast<int64_t>(rng() % 5);
  o.lda = (ta ? s.m : s.k) + pad;
  o.ldb = (tb ? s.k : s.n) + pad;
  o.ldc = s.n + pad;
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  o.a.resize(static_cast<size_t>((ta ? s.k : s.m) * o.lda));
  o.b.resize(static_cast<size_t>((tb ? s.n : s.k) * o.ldb));
  o.c0.resize(static_cast<size_t>(s.m * o.ldc));
  for (float& x : o.a) x = d(rng);
  for (float& x : o.b) x = d(rng);
  for (float& x : o.c0) x = d(rng);
  return o;
}

std::vector<float> Product(const Operands& o, float alpha, float beta) {
  std::vector<float> c = o.c0;
  internal::Sgemm(o.ta, o.tb, o.m, o.n, o.k, alpha, o.a.data(), o.lda, o.b.data(), o.ldb, beta,
                  c.data(), o.ldc);
  return c;
}

// Shapes of several panels (each at least 4 MFLOP, a multiple of 16 rows or columns, the last
// shorter): with up to 16 panels, 301x97x330 is cut into 4 panels of rows, 45x611x200 into 2 of
// columns, 1030x33x200 into 3 of rows; 17x19x23 is below one panel (not cut). With up to 2
// panels the first and third are cut in 2 (wider panels) and the others as before.
const Shape kShapes[] = {{301, 97, 330}, {45, 611, 200}, {1030, 33, 200}, {17, 19, 23}};

TEST(HostGemmPanelsTest, ShapesAreCutAsDocumented) {
  struct Case {
    int64_t max_panels;
    internal::GemmCut want[4];
  };
  const Case cases[] = {
      {16, {{true, 80, 4}, {false, 320, 2}, {true, 352, 3}, {false, 32, 1}}},
      {2, {{true, 160, 2}, {false, 320, 2}, {true, 528, 2}, {false, 32, 1}}},
  };
  for (const Case& cs : cases) {
    for (size_t i = 0; i < std::size(kShapes); ++i) {
      const internal::GemmCut c =
          internal::CutGemm(kShapes[i].m, kShapes[i].n, kShapes[i].k, cs.max_panels);
      EXPECT_EQ(c.by_rows, cs.want[i].by_rows) << i << " max " << cs.max_panels;
      EXPECT_EQ(c.panels, cs.want[i].panels) << i << " max " << cs.max_panels;
      if (c.panels > 1) {
        EXPECT_EQ(c.width, cs.want[i].width) << i << " max " << cs.max_panels;
      }
    }
  }
  // Two per CPU of the machine, between 2 and 16.
  const int64_t p = internal::GemmMaxPanels();
  EXPECT_GE(p, 2);
  EXPECT_LE(p, 16);
  EXPECT_EQ(p % 2, 0);
}

TEST(HostGemmPanelsTest, EveryTransposeAndShapeMatchesADoubleProduct) {
  std::mt19937_64 rng(::strata::testing::TestSeed());
  for (const Shape& s : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      const Operands o = Make(s, ta, tb, rng);
      const float alpha = 0.75f, beta = -1.5f;
      const std::vector<float> c = Product(o, alpha, beta);
      auto A = [&](int64_t i, int64_t p) {
        return o.a[static_cast<size_t>(ta ? p * o.lda + i : i * o.lda + p)];
      };
      auto B = [&](int64_t p, int64_t j) {
        return o.b[static_cast<size_t>(tb ? j * o.ldb + p : p * o.ldb + j)];
      };
      const std::string where = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                std::to_string(s.k) + " ta=" + std::to_string(ta) +
                                " tb=" + std::to_string(tb);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < o.ldc; ++j) {
          const size_t at = static_cast<size_t>(i * o.ldc + j);
          if (j >= s.n) {  // the padding of C is not touched
            ASSERT_EQ(c[at], o.c0[at]) << where << " padding at " << i << "," << j;
            continue;
          }
          double dot = 0, mag = 0;
          for (int64_t p = 0; p < s.k; ++p) {
            dot += double(A(i, p)) * double(B(p, j));
            mag += std::abs(double(A(i, p)) * double(B(p, j)));
          }
          const double want = double(alpha) * dot + double(beta) * double(o.c0[at]);
          const double tol = 1e-6 * (std::abs(double(alpha)) * mag + std::abs(double(beta))) + 1e-6;
          ASSERT_NEAR(c[at], want, tol) << where << " at " << i << "," << j;
        }
      }
    }
  }
}

TEST(HostGemmPanelsTest, TheBitsDoNotDependOnTheNumberOfThreads) {
  std::mt19937_64 rng(::strata::testing::TestSeed() + 1);
  for (const Shape& s : kShapes) {
    const Operands o = Make(s, (rng() & 1) != 0, (rng() & 1) != 0, rng);
    std::vector<float> one;
    {
      tbb::global_control cap(tbb::global_control::max_allowed_parallelism, 1);
      one = Product(o, 1.0f, 0.5f);
    }
    for (int threads : {2, 3}) {
      tbb::task_arena arena(threads);
      std::vector<float> many;
      arena.execute([&] { many = Product(o, 1.0f, 0.5f); });
      ASSERT_EQ(many, one) << s.m << "x" << s.n << "x" << s.k << " on " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace strata::nn
