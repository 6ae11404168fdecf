"""strata.aio: Strata's async file I/O with DeepSpeed's aio_handle API.

    h = strata.aio.Handle(block_size=1 << 20, queue_depth=8, single_submit=False,
                          overlap_events=True, intra_op_parallelism=1)
    buf = h.new_cpu_locked_tensor(n, torch.empty(0, dtype=torch.float32))
    h.async_pwrite(buf, "/nvme/x.bin", 0)      # returns 0, queued
    assert h.wait() == 1                       # number of requests completed
    h.sync_pread(buf, "/nvme/x.bin", 0)        # returns 1

Buffers are contiguous CPU torch tensors, NumPy arrays or anything with the buffer protocol; any
size, file offset and alignment works. A failed request - including a read past the end of a
file - raises OSError(errno, message, filename) with `.offset` (the request's file offset): never
a short count. The GIL is released while requests run. A buffer passed to async_* must not be
modified (or, for reads, used) until wait() returns; the handle keeps it alive until then.

Keyword-only options beyond DeepSpeed's: engine ("auto" | "io_uring" | "libaio"),
allow_buffered (a filesystem without O_DIRECT gets buffered I/O instead of an error),
keep_files_open (keep files open between requests; by default a file is closed when its last
request finishes, so a file replaced on disk is seen anew, as with DeepSpeed).
"""

from . import _C

__all__ = ["Handle", "PinnedMemory"]

PinnedMemory = _C.PinnedMemory


class Handle(_C.Handle):
    """Async NVMe handle: Handle(block_size, queue_depth, single_submit, overlap_events,
    intra_op_parallelism, *, engine="auto", allow_buffered=False, keep_files_open=False)."""

    def new_cpu_locked_tensor(self, num_elem, example_tensor):
        """A 1-D CPU tensor of `num_elem` elements with `example_tensor`'s dtype, on huge-page,
        page-locked memory (2 MiB-aligned; mlocked when RLIMIT_MEMLOCK allows, see
        PinnedMemory.locked). The memory is freed when the last tensor or view on it is gone."""
        import torch

        dtype = example_tensor.dtype if isinstance(example_tensor, torch.Tensor) else example_tensor
        num_elem = int(num_elem)
        if num_elem < 0:
            raise ValueError(f"num_elem {num_elem} must be >= 0")
        elem = torch.empty((), dtype=dtype).element_size()
        mem = self._new_pinned_memory(num_elem * elem)
        if num_elem == 0:
            return torch.empty(0, dtype=dtype)
        # frombuffer holds a reference to `mem` for the tensor's lifetime (and its views').
        tensor = torch.frombuffer(mem, dtype=dtype, count=num_elem)
        self._locked_addresses().add(mem.address)
        return tensor

    def free_cpu_locked_tensor(self, tensor):
        """Forgets a tensor made by new_cpu_locked_tensor; True if it was one of this handle's.
        Unlike DeepSpeed, the memory is not freed under live tensors: it goes when the last
        tensor or view on it does."""
        addresses = self._locked_addresses()
        address = tensor.data_ptr()
        if address not in addresses:
            return False
        addresses.discard(address)
        return True

    # DeepSpeed's older entry points, same meanings. `validate` re-reads the range through the
    # page cache and compares (a debugging aid; every request is already checked).
    def read(self, buffer, filename, validate=False):
        return self.pread(buffer, filename, validate, False, 0)

    def write(self, buffer, filename, validate=False):
        return self.pwrite(buffer, filename, validate, False, 0)

    def pread(self, buffer, filename, validate=False, async_op=False, file_offset=0):
        if async_op:
            _no_async_validate(validate)
            return self.async_pread(buffer, filename, file_offset)
        done = self.sync_pread(buffer, filename, file_offset)
        if validate:
            _validate(buffer, filename, file_offset)
        return done

    def pwrite(self, buffer, filename, validate=False, async_op=False, file_offset=0):
        if async_op:
            _no_async_validate(validate)
            return self.async_pwrite(buffer, filename, file_offset)
        done = self.sync_pwrite(buffer, filename, file_offset)
        if validate:
            _validate(buffer, filename, file_offset)
        return done

    def _locked_addresses(self):
        if "_locked" not in self.__dict__:
            self.__dict__["_locked"] = set()
        return self.__dict__["_locked"]


def _no_async_validate(validate):
    if validate:
        raise ValueError("validate=True needs a synchronous request (async_op=False)")


def _validate(buffer, filename, offset):
    import errno
    import os

    data = memoryview(_bytes_of(buffer))
    with open(filename, "rb") as f:
        disk = os.pread(f.fileno(), len(data), offset)
    if disk != data:
        raise OSError(errno.EIO, f"validate: {len(data)} bytes at offset {offset} differ from "
                                 f"the buffer", os.fsdecode(filename))


def _bytes_of(buffer):
    """The bytes of a tensor / array / buffer (a copy for tensors)."""
    if hasattr(buffer, "data_ptr") and hasattr(buffer, "numpy"):
        import torch

        return buffer.detach().reshape(-1).view(torch.uint8).numpy().tobytes()
    if hasattr(buffer, "tobytes"):
        return buffer.tobytes()
    return bytes(memoryview(buffer))
