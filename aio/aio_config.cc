#include "aio/aio_config.h"

#include "core/json_config.h"

namespace strata {

Status ApplyAioSection(const nlohmann::json& aio, AioOptions* o) {
  STRATA_RETURN_IF_ERROR(
      CheckKnownKeys(aio, "aio",
                     {"block_size", "queue_depth", "intra_op_parallelism", "thread_count",
                      "single_submit", "overlap_events", "use_gds"}));
  if (aio.contains("intra_op_parallelism") && aio.contains("thread_count")) {
    return InvalidArgumentError(
        "config 'aio' sets both 'intra_op_parallelism' and its old name 'thread_count'; keep one");
  }
  int64_t v = static_cast<int64_t>(o->block_size);
  STRATA_RETURN_IF_ERROR(ReadInt(aio, "aio", "block_size", 4096, int64_t{1} << 30, &v));
  if (v % 4096 != 0) {
    return InvalidArgumentError("config 'aio.block_size' = " + std::to_string(v) +
                                " must be a multiple of 4096");
  }
  o->block_size = static_cast<size_t>(v);
  v = o->queue_depth;
  STRATA_RETURN_IF_ERROR(ReadInt(aio, "aio", "queue_depth", 1, 1024, &v));
  o->queue_depth = static_cast<int>(v);
  v = o->thread_count;
  STRATA_RETURN_IF_ERROR(ReadInt(aio, "aio", "intra_op_parallelism", 1, 64, &v));
  STRATA_RETURN_IF_ERROR(ReadInt(aio, "aio", "thread_count", 1, 64, &v));
  o->thread_count = static_cast<int>(v);
  STRATA_RETURN_IF_ERROR(ReadBool(aio, "aio", "single_submit", &o->single_submit));
  STRATA_RETURN_IF_ERROR(ReadBool(aio, "aio", "overlap_events", &o->overlap_events));
  bool gds = false;
  STRATA_RETURN_IF_ERROR(ReadBool(aio, "aio", "use_gds", &gds));
  if (gds) {
    return UnavailableError(
        "config 'aio.use_gds' = true: GPUDirect Storage is not supported by this build");
  }
  return Status::Ok();
}

Status ApplyStrataAioKeys(const nlohmann::json& strata, AioOptions* o) {
  if (!strata.is_object()) return InvalidArgumentError("config 'strata' must be an object");
  std::string engine(IoEngineKindName(o->engine));
  STRATA_RETURN_IF_ERROR(
      ReadEnum(strata, "strata", "aio_engine", {"io_uring", "libaio", "auto"}, &engine));
  STRATA_ASSIGN_OR_RETURN(o->engine, ParseIoEngineKind(engine));
  STRATA_RETURN_IF_ERROR(ReadBool(strata, "strata", "aio_allow_buffered", &o->allow_buffered));
  STRATA_RETURN_IF_ERROR(ReadBool(strata, "strata", "aio_sqpoll", &o->sqpoll));
  return Status::Ok();
}

nlohmann::json AioSectionJson(const AioOptions& o) {
  return nlohmann::json{{"block_size", o.block_size},
                        {"queue_depth", o.queue_depth},
                        {"intra_op_parallelism", o.thread_count},
                        {"single_submit", o.single_submit},
                        {"overlap_events", o.overlap_events},
                        {"use_gds", false}};
}

}  // namespace strata
