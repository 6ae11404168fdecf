// bench/swap_layout: the measurement behind SwapSpace's file layout. Writes then reads N tensors
// through one AioHandle, (a) one file per tensor (DeepSpeed's layout; the handle still caches
// the open files) and (b) Strata's few preallocated files with an extent table, in ABBA order.
// Prints GB/s of each and (b)/(a).
//   swap_layout [--path DIR]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "aio/direct/aligned_buffer.h"
#include "core/flags.h"
#include "core/units.h"
#include "swap/swap_space.h"

namespace {

using Clock = std::chrono::steady_clock;
using strata::AioHandle;

struct Times {
  double write_s = 0, read_s = 0;
};

// Keeps kDepth tensors in flight, like a swapper streaming through its buffers: submit(i)
// starts tensor i and returns its future. Returns the seconds taken; exits on an I/O error.
constexpr int kDepth = 4;

template <typename Submit>
double Stream(int n, Submit submit) {
  auto check = [](const auto& r) {
    if (r.ok()) return;
    std::fprintf(stderr, "swap_layout: I/O failed\n");
    std::exit(1);
  };
  const auto t0 = Clock::now();
  std::vector<decltype(submit(0))> fs;
  for (int i = 0; i < n; ++i) {
    if (fs.size() == kDepth) {
      check(fs.front().Wait());
      fs.erase(fs.begin());
    }
    fs.push_back(submit(i));
  }
  for (auto& f : fs) check(f.Wait());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Times PerTensorFiles(AioHandle& aio, const std::string& dir, int n, size_t size, uint8_t* buf) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(dir + "/tensor_" + std::to_string(i) + ".swp");
  Times t;
  t.write_s = Stream(
      n, [&](int i) { return aio.SubmitWrite(names[i], buf + (i % kDepth) * size, size, 0); });
  t.read_s = Stream(
      n, [&](int i) { return aio.SubmitRead(names[i], buf + (i % kDepth) * size, size, 0); });
  for (auto& name : names) {
    aio.Close(name).IgnoreError();
    std::filesystem::remove(name);
  }
  return t;
}

Times OneSpace(AioHandle& aio, const std::string& dir, int n, size_t size, uint8_t* buf) {
  strata::SwapSpaceOptions o;
  o.dirs = {dir};
  o.name = "layout";
  auto space = std::move(strata::SwapSpace::Create(o, &aio)).value();
  std::vector<strata::SwapId> ids;
  Times t;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) ids.push_back(*space->Reserve(size));  // fallocate is counted
  const double reserve_s = std::chrono::duration<double>(Clock::now() - t0).count();
  t.write_s =
      reserve_s + Stream(n, [&](int i) { return space->Write(ids[i], buf + (i % kDepth) * size); });
  t.read_s = Stream(n, [&](int i) { return space->Read(ids[i], buf + (i % kDepth) * size); });
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = ".";
  strata::FlagParser flags("swap_layout [--path DIR]");
  flags.String("path", &path, "directory on the drive to measure");
  std::vector<std::string> positional;
  strata::Status s = flags.Parse(argc, argv, 1, &positional);
  if (s.ok() && !positional.empty()) {
    s = strata::InvalidArgumentError("unexpected argument '" + positional[0] + "'");
  }
  if (flags.help_requested()) {
    std::printf("%s\n", flags.Help().c_str());
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "swap_layout: %s\n%s\n", s.message().c_str(), flags.Help().c_str());
    return 2;
  }
  const std::string dir = path + "/swap_layout." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto aio = std::move(AioHandle::Create({})).value();
  std::printf("%-22s %10s %10s %10s %10s %8s %8s\n", "tensors", "files w", "files r", "space w",
              "space r", "w ratio", "r ratio");
  for (auto [n, size] : {std::pair{2048, size_t{256} << 10}, std::pair{512, size_t{2} << 20},
                         std::pair{64, size_t{32} << 20}}) {
    auto buf = std::move(strata::AlignedBuffer::Allocate(kDepth * size)).value();
    const double bytes = static_cast<double>(n) * static_cast<double>(size);
    Times a1 = PerTensorFiles(*aio, dir, n, size, buf.bytes());
    Times b1 = OneSpace(*aio, dir, n, size, buf.bytes());
    Times b2 = OneSpace(*aio, dir, n, size, buf.bytes());
    Times a2 = PerTensorFiles(*aio, dir, n, size, buf.bytes());
    double aw = 2 * bytes / (a1.write_s + a2.write_s) / 1e9,
           ar = 2 * bytes / (a1.read_s + a2.read_s) / 1e9;
    double bw = 2 * bytes / (b1.write_s + b2.write_s) / 1e9,
           br = 2 * bytes / (b1.read_s + b2.read_s) / 1e9;
    std::string label = std::to_string(n) + " x " + strata::FormatBytes(size);
    std::printf("%-22s %10.2f %10.2f %10.2f %10.2f %8.2f %8.2f\n", label.c_str(), aw, ar, bw, br,
                bw / aw, br / ar);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
