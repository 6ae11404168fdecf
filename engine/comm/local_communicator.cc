#include "engine/comm/local_communicator.h"

#include "engine/comm/collective.h"
#include "offload/device/api/kernels.h"

namespace strata::internal {
namespace {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world_size() const override { return 1; }
  std::string_view backend_name() const override { return "local"; }

  Status AllGather(const Stream& stream, const void* send_shard, void* recv, size_t numel,
                   DType dtype, Event* done) override {
    return Copy({CollectiveKind::kAllGather, 0, dtype, numel}, stream, send_shard, recv, 1.0f,
                done);
  }
  Status ReduceScatter(const Stream& stream, const void* send, void* recv_shard, size_t numel,
                       DType dtype, const ReduceScatterOptions& options, Event* done) override {
    CollectiveDesc d{CollectiveKind::kReduceScatter, 0, dtype, numel};
    d.predivide_factor = options.predivide_factor;
    return Copy(d, stream, send, recv_shard, static_cast<float>(1.0 / options.predivide_factor),
                done);
  }
  Status AllReduce(const Stream& stream, const void* send, void* recv, size_t numel, DType dtype,
                   ReduceOp op, Event* done) override {
    return Copy({CollectiveKind::kAllReduce, 0, dtype, numel, op}, stream, send, recv, 1.0f, done);
  }
  Status Broadcast(const Stream& stream, void* buffer, size_t numel, DType dtype, int root,
                   Event* done) override {
    CollectiveDesc d{CollectiveKind::kBroadcast, 0, dtype, numel};
    d.root = root;
    STRATA_RETURN_IF_ERROR(ValidateCollective("local", d, {buffer, buffer}, 0, 1, stream, done));
    return done != nullptr ? done->Record(stream) : Status::Ok();
  }
  Status Barrier(const Stream& stream, Event* done) override {
    STRATA_RETURN_IF_ERROR(
        ValidateCollective("local", {CollectiveKind::kBarrier}, {}, 0, 1, stream, done));
    return done != nullptr ? done->Record(stream) : Status::Ok();
  }
  Result<std::unique_ptr<Communicator>> Split(int color, int /*key*/) override {
    if (color < 0) return std::unique_ptr<Communicator>();
    return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
  }

 private:
  // recv = send * scale on the stream (a device-to-device copy when scale is 1).
  static Status Copy(const CollectiveDesc& d, const Stream& stream, const void* send, void* recv,
                     float scale, Event* done) {
    STRATA_RETURN_IF_ERROR(ValidateCollective("local", d, {send, recv}, 0, 1, stream, done));
    if (d.numel > 0 && scale != 1.0f) {
      STRATA_RETURN_IF_ERROR(LaunchScale(stream, recv, d.dtype, send, scale, d.numel));
    } else if (d.numel > 0 && send != recv) {
      STRATA_RETURN_IF_ERROR(
          stream.CopyAsync(recv, send, d.numel * DTypeBytes(d.dtype), CopyKind::kDeviceToDevice));
    }
    return done != nullptr ? done->Record(stream) : Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Communicator> CreateLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace strata::internal
