// The plumbing shared by the CUDA nn ops: error translation, stream resolution, cuBLAS handles,
// stream-ordered scratch, the GPU-side index check and the row-major GEMM on cuBLAS.
#include "nn/cuda/cuda_context.h"

#include <climits>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "nn/cuda/cuda_nn_kernels.h"
#include "offload/device/cuda/cublas_library.h"
#include "offload/device/cuda/cuda_device.h"

namespace strata::nn::internal::cuda {
namespace {

std::string Where(const char* op, const char* what) { return std::string(op) + ": " + what + ": "; }

// Note [cuBLAS handles]
// One handle per (GPU, cudaStream_t), created on first use and kept for the life of the process
// (destroying handles at exit races the driver's own teardown; PyTorch keeps them too). A handle
// only ever serves its own stream, so cuBLAS's default workspace is never shared by two streams
// running at once; the entry's mutex makes concurrent enqueues on one stream take turns. A
// stream destroyed and its cudaStream_t value reused by a new stream of the same GPU simply
// reuses the handle (cublasSetStream is called on every lease).
struct BlasEntry {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
};

std::mutex g_blas_mu;
using BlasKey = std::pair<int, uintptr_t>;  // (GPU ordinal, cudaStream_t)
std::map<BlasKey, std::unique_ptr<BlasEntry>>& BlasEntries() {
  static auto* entries = new std::map<BlasKey, std::unique_ptr<BlasEntry>>();  // never destroyed
  return *entries;
}

// Slots of mapped, portable pinned memory for index checks (Note [CUDA op errors]); chunks are
// allocated on demand and kept for the process. The GPU writes a slot through its device alias
// (with unified addressing, on every sm_80/sm_90 system, the same address on every GPU).
struct Slot {
  uint64_t* host = nullptr;
  uint64_t* device = nullptr;
};

class SlotPool {
 public:
  Result<Slot> Acquire(const char* op) {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) return Pop();
    }
    // A new chunk, allocated outside the lock: host functions releasing slots never wait on a
    // CUDA call.
    constexpr size_t kSlots = 512;
    void* host = nullptr;
    STRATA_RETURN_IF_ERROR(CudaErr(cudaHostAlloc(&host, kSlots * sizeof(uint64_t),
                                                 cudaHostAllocMapped | cudaHostAllocPortable),
                                   op, "cudaHostAlloc (index-check slots)"));
    void* device = nullptr;
    STRATA_RETURN_IF_ERROR(
        CudaErr(cudaHostGetDevicePointer(&device, host, 0), op, "cudaHostGetDevicePointer"));
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < kSlots; ++i) {
      free_.push_back(Slot{static_cast<uint64_t*>(host) + i, static_cast<uint64_t*>(device) + i});
    }
    return Pop();
  }
  void Release(Slot s) {
    std::lock_guard lock(mu_);
    free_.push_back(s);
  }

 private:
  Slot Pop() {  // requires mu_ and a free slot
    Slot s = free_.back();
    free_.pop_back();
    return s;
  }

  std::mutex mu_;
  std::vector<Slot> free_;
};

SlotPool& Slots() {
  static auto* pool = new SlotPool();  // lives for the process, like the pinned chunks
  return *pool;
}

std::string IndexError(IndexKind kind, const char* op, uint64_t found, int64_t limit) {
  const std::string value = std::to_string(static_cast<int32_t>(found & 0xFFFFFFFFu));
  const std::string at = std::to_string(found >> 32);
  const std::string range = " is outside [0, " + std::to_string(limit) + ")";
  switch (kind) {
    case IndexKind::kTokenId:
      return std::string(op) + ": token id " + value + " at position " + at + range;
    case IndexKind::kPosition:
      return "rope: position " + value + " of token " + at + range;
    case IndexKind::kLabel:
      return "cross_entropy: label " + value + " at position " + at + range + " and is not -100";
  }
  return std::string(op) + ": bad index";
}

bool FitsInt(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

Status CudaErr(int err, const char* op, const char* what) {
  if (err == 0) return Status::Ok();
  const auto e = static_cast<cudaError_t>(err);
  std::string msg = Where(op, what) + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  switch (e) {
    case cudaErrorMemoryAllocation:
      return OutOfMemoryError("out of memory on tier device: " + msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevicePointer:
      return InvalidArgumentError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
      return UnavailableError(msg);
    default:
      return InternalError(msg);
  }
}

Status BlasErr(cublasStatus_t status, const char* op, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  // A status comes from a cuBLAS call, so cuBLAS is loaded (Note [cuBLAS loaded on demand]).
  const ::strata::internal::CublasApi& blas = ::strata::internal::Cublas();
  std::string msg =
      Where(op, what) + blas.status_name(status) + " (" + blas.status_string(status) + ")";
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return OutOfMemoryError("out of memory on tier device: " + msg);
    case CUBLAS_STATUS_INVALID_VALUE:
      return InvalidArgumentError(msg);
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return UnimplementedError(msg);
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return UnavailableError(msg);
    default:
      return InternalError(msg);
  }
}

Result<OpStream> Resolve(const Stream& stream, const char* op) {
  Result<CudaNativeStream> native = CudaNativeStreamOf(stream);
  if (!native.ok()) return native.status().WithContext(op);
  OpStream s;
  s.stream = stream;
  s.cuda = static_cast<cudaStream_t>(native->stream);
  s.ordinal = native->ordinal;
  s.op = op;
  return s;
}

Result<BlasLease> LeaseBlas(const OpStream& s) {
  // Loaded when the stream's CudaDevice was created (Note [cuBLAS loaded on demand]); this only
  // reads the table, or repeats the load's error.
  Result<const ::strata::internal::CublasApi*> blas = ::strata::internal::LoadCublas();
  if (!blas.ok()) return blas.status().WithContext(s.op);
  BlasEntry* entry;
  {
    std::lock_guard lock(g_blas_mu);
    std::unique_ptr<BlasEntry>& slot =
        BlasEntries()[BlasKey(s.ordinal, reinterpret_cast<uintptr_t>(s.cuda))];
    if (slot == nullptr) {
      cublasHandle_t handle = nullptr;
      STRATA_RETURN_IF_ERROR(BlasErr((*blas)->create(&handle), s.op, "cublasCreate"));
      slot = std::make_unique<BlasEntry>();
      slot->handle = handle;
    }
    entry = slot.get();
  }
  std::unique_lock lock(entry->mu);
  STRATA_RETURN_IF_ERROR(
      BlasErr((*blas)->set_stream(entry->handle, s.cuda), s.op, "cublasSetStream"));
  return BlasLease(entry->handle, std::move(lock));
}

Scratch::~Scratch() { Release().IgnoreError(); }  // error paths only; Release reports normally

Result<float*> Scratch::Floats(int64_t count) {
  if (used_ == kMaxBlocks) {
    return InternalError(std::string(s_.op) + ": more than " + std::to_string(kMaxBlocks) +
                         " scratch blocks in one op");
  }
  const size_t bytes = static_cast<size_t>(count > 0 ? count : 1) * sizeof(float);
  Result<void*> p = s_.stream.device()->Allocate(bytes);
  if (!p.ok()) return p.status().WithContext(std::string(s_.op) + ": scratch");
  blocks_[used_++] = *p;
  return static_cast<float*>(*p);
}

Status Scratch::Release() {
  Status first;
  for (int i = 0; i < used_; ++i) {
    Status s = s_.stream.device()->FreeAsync(s_.stream, blocks_[i]);
    if (first.ok() && !s.ok()) first = s.WithContext(std::string(s_.op) + ": scratch");
    blocks_[i] = nullptr;
  }
  used_ = 0;
  return first;
}

Status EnqueueIndexCheck(const OpStream& s, const int32_t* idx, int64_t n, int64_t limit,
                         IndexKind kind) {
  STRATA_ASSIGN_OR_RETURN(Slot slot, Slots().Acquire(s.op));
  Status st =
      CudaErr(LaunchCheckIndices(idx, n, limit, kind == IndexKind::kLabel, slot.device, s.raw()),
              s.op, "index check launch");
  if (st.ok()) {
    const char* op = s.op;
    // The check kernel has finished when this runs (stream order), and its write to the mapped
    // slot is visible to the host once the kernel completes.
    st = s.stream.LaunchHostFunc([slot, op, limit, kind]() -> Status {
      const uint64_t found = *static_cast<volatile uint64_t*>(slot.host);
      Slots().Release(slot);
      if (found == kNoBadIndex) return Status::Ok();
      return InvalidArgumentError(IndexError(kind, op, found, limit));
    });
    if (st.ok()) return st;
  }
  Slots().Release(slot);  // nothing will read it
  return st;
}

Status RunGemm(const OpStream& s, cublasHandle_t handle, const RowMajorGemm& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return Status::Ok();
  if (g.k == 0) {  // C = beta C; A and B are never read (and may be null)
    if (g.beta == 1.0f) return Status::Ok();
    return CudaErr(LaunchScaleMatrix(g.c, g.batch, g.m, g.n, g.ldc, g.stride_c, g.beta, s.raw()),
                   s.op, "scale C (k = 0)");
  }
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch}) {
    if (!FitsInt(v)) {
      return InvalidArgumentError(std::string(s.op) +
                                  ": a GEMM dimension or leading dimension exceeds INT_MAX (" +
                                  std::to_string(v) + "); cuBLAS takes 32-bit sizes");
    }
  }
  // Row-major C[m, n] is column-major C^T[n, m] = op(B)^T op(A)^T: swap the operands.
  const float alpha = g.alpha, beta = g.beta;
  return BlasErr(
      ::strata::internal::Cublas().gemm_strided_batched(
          handle, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
          static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha, g.b, g.type,
          static_cast<int>(g.ldb), g.stride_b, g.a, g.type, static_cast<int>(g.lda), g.stride_a,
          &beta, g.c, CUDA_R_32F, static_cast<int>(g.ldc), g.stride_c, static_cast<int>(g.batch),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      s.op, "cublasGemmStridedBatchedEx");
}

}  // namespace strata::nn::internal::cuda
