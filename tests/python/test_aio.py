"""strata.aio.Handle: round trips through files on both engines, errors, pinned tensors."""

import errno
import gc
import os
import sys
import threading
import unittest

import support

torch = support.require_torch()
import numpy  # noqa: E402  (python3-numpy; torch depends on it)
import strata  # noqa: E402
import strata.aio  # noqa: E402

# Odd sizes (bytes) and offsets: unaligned heads and tails, pieces across block boundaries.
SIZES = [1, 4095, 4096, 4097, 65536 + 13, (1 << 20) + 7, (3 << 20) + 4101]
OFFSETS = [0, 1, 4096, 12345, (1 << 20) + 3]
ENGINES = ["libaio", "io_uring"]


def make_handle(test, engine, **kw):
    """A handle on `engine`; skips the test (with the kernel's reason) when the engine is refused."""
    args = dict(block_size=64 << 10, queue_depth=4, single_submit=False, overlap_events=True,
                intra_op_parallelism=2)
    args.update(kw)
    try:
        return strata.aio.Handle(**args, engine=engine)
    except (RuntimeError, OSError) as e:
        if engine == "io_uring":
            test.skipTest(f"io_uring refused here: {e}")
        raise


def random_bytes(gen, n):
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)


class RoundTripTest(unittest.TestCase):
    def setUp(self):
        self.scratch = support.ScratchDir().__enter__()
        self.gen = torch.Generator().manual_seed(support.seed())

    def tearDown(self):
        self.scratch.__exit__(None, None, None)

    def test_sync_round_trips_odd_sizes_and_offsets(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                h = make_handle(self, engine)
                for size in SIZES:
                    for offset in OFFSETS:
                        path = self.scratch.file(f"{engine}_{size}_{offset}.bin")
                        data = random_bytes(self.gen, size)
                        self.assertEqual(h.sync_pwrite(data, path, offset), 1)
                        self.assertEqual(os.path.getsize(path), offset + size)
                        back = torch.zeros(size, dtype=torch.uint8)
                        self.assertEqual(h.sync_pread(back, path, offset), 1)
                        self.assertTrue(torch.equal(back, data), f"{size} B @ {offset}")
                        os.remove(path)

    def test_async_requests_complete_on_wait(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                h = make_handle(self, engine, intra_op_parallelism=1, overlap_events=False,
                                single_submit=True)
                path = self.scratch.file(f"{engine}_async.bin")
                # fp32 tensors of odd lengths, packed back to back at odd offsets.
                tensors = [torch.randn(n, generator=self.gen) for n in (1, 1023, 70001, 5)]
                offsets, at = [], 3
                for t in tensors:
                    offsets.append(at)
                    at += t.numel() * 4
                for t, off in zip(tensors, offsets):
                    self.assertEqual(h.async_pwrite(t, path, off), 0)
                self.assertEqual(h.pending, len(tensors))
                self.assertEqual(h.wait(), len(tensors))
                self.assertEqual(h.wait(), 0)
                back = [torch.empty_like(t) for t in tensors]
                for t, off in zip(back, offsets):
                    h.async_pread(t, path, off)
                self.assertEqual(h.wait(), len(tensors))
                for a, b in zip(tensors, back):
                    self.assertTrue(torch.equal(a, b))

    def test_numpy_arrays_and_buffers(self):
        h = make_handle(self, "libaio")
        path = self.scratch.file("np.bin")
        arr = numpy.arange(10001, dtype=numpy.float32)
        h.sync_pwrite(arr, path, 7)
        out = numpy.zeros_like(arr)
        h.sync_pread(out, path, 7)
        numpy.testing.assert_array_equal(arr, out)
        raw = bytearray(5000)
        h.sync_pread(raw, path, 7)
        self.assertEqual(bytes(raw), arr.tobytes()[:5000])
        h.sync_pwrite(memoryview(b"hello strata"), path, 0)
        small = bytearray(12)
        h.sync_pread(memoryview(small), path, 0)
        self.assertEqual(bytes(small), b"hello strata")

    def test_deepspeed_older_entry_points(self):
        h = make_handle(self, "libaio")
        path = self.scratch.file("compat.bin")
        data = torch.randn(3001, generator=self.gen).to(torch.bfloat16)
        self.assertEqual(h.write(data, path, True), 1)
        back = torch.empty_like(data)
        self.assertEqual(h.read(back, path, True), 1)
        self.assertTrue(torch.equal(back, data))
        self.assertEqual(h.pwrite(data, path, False, True, 100), 0)
        self.assertEqual(h.wait(), 1)
        self.assertEqual(h.pread(back, path, True, False, 100), 1)
        self.assertTrue(torch.equal(back, data))
        with self.assertRaisesRegex(ValueError, "validate=True needs a synchronous request"):
            h.pread(back, path, True, True, 0)

    def test_threads_share_a_handle(self):
        h = make_handle(self, "libaio")
        errors = []

        def worker(k):
            try:
                gen = torch.Generator().manual_seed(k)
                for i in range(5):
                    path = self.scratch.file(f"thread{k}_{i}.bin")
                    data = random_bytes(gen, 300001 + k)
                    h.sync_pwrite(data, path, k)
                    back = torch.empty_like(data)
                    h.sync_pread(back, path, k)
                    if not torch.equal(back, data):
                        errors.append(f"thread {k} file {i} differs")
            except Exception as e:  # reported below
                errors.append(repr(e))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])


class ErrorTest(unittest.TestCase):
    def setUp(self):
        self.scratch = support.ScratchDir().__enter__()

    def tearDown(self):
        self.scratch.__exit__(None, None, None)

    def test_read_past_end_raises_oserror_naming_the_file(self):
        for engine in ENGINES:
            with self.subTest(engine=engine):
                h = make_handle(self, engine)
                path = self.scratch.file(f"short_{engine}.bin")
                h.sync_pwrite(torch.ones(1000, dtype=torch.uint8), path, 0)
                buf = torch.zeros(200000, dtype=torch.uint8)
                with self.assertRaises(OSError) as ctx:
                    h.sync_pread(buf, path, 0)
                e = ctx.exception
                self.assertEqual(e.filename, path)
                self.assertEqual(e.errno, errno.EIO)
                self.assertEqual(e.offset, 0)
                # The piece that met the end first is named (which one depends on timing).
                self.assertRegex(str(e), r"read .*short_.*\.bin @ \d+ .*ends at offset \d+")
                # The same through the async path, at an offset.
                h.async_pread(buf, path, 512)
                with self.assertRaises(OSError) as ctx:
                    h.wait()
                self.assertEqual(ctx.exception.filename, path)
                self.assertEqual(ctx.exception.offset, 512)
                self.assertEqual(h.pending, 0)

    def test_missing_file_is_file_not_found(self):
        h = make_handle(self, "libaio")
        path = self.scratch.file("missing.bin")
        with self.assertRaises(FileNotFoundError) as ctx:
            h.sync_pread(torch.zeros(10), path, 0)
        self.assertEqual(ctx.exception.errno, errno.ENOENT)
        self.assertEqual(ctx.exception.filename, path)

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "block_size 1000"):
            strata.aio.Handle(1000, 8, False, True, 1)
        with self.assertRaisesRegex(ValueError, "queue_depth 0"):
            strata.aio.Handle(1 << 20, 0, False, True, 1)
        with self.assertRaisesRegex(ValueError, "unknown aio engine 'spdk'"):
            strata.aio.Handle(engine="spdk")
        h = make_handle(self, "libaio")
        path = self.scratch.file("x.bin")
        with self.assertRaisesRegex(ValueError, "offset -1"):
            h.sync_pwrite(torch.zeros(4), path, -1)
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            h.sync_pwrite(torch.zeros(4, 4).t(), path, 0)
        with self.assertRaisesRegex(ValueError, "meta: strata takes CPU tensors only"):
            h.sync_pwrite(torch.empty(4, device="meta"), path, 0)
        with self.assertRaisesRegex(ValueError, "not writable"):
            h.sync_pread(b"immutable", path, 0)
        with self.assertRaisesRegex(TypeError, "must be a torch.Tensor"):
            h.sync_pwrite(12345, path, 0)

    def test_getters_report_the_options(self):
        h = strata.aio.Handle(1 << 20, 16, True, False, 2, engine="libaio")
        self.assertEqual(h.get_block_size(), 1 << 20)
        self.assertEqual(h.get_queue_depth(), 16)
        self.assertTrue(h.get_single_submit())
        self.assertFalse(h.get_overlap_events())
        self.assertEqual(h.get_intra_op_parallelism(), 2)
        self.assertIn("libaio", repr(h))


class PinnedTensorTest(unittest.TestCase):
    def setUp(self):
        self.scratch = support.ScratchDir().__enter__()

    def tearDown(self):
        self.scratch.__exit__(None, None, None)

    def test_pinned_tensor_is_a_normal_tensor(self):
        h = make_handle(self, "libaio")
        for dtype in (torch.float32, torch.bfloat16, torch.uint8, torch.float64):
            with self.subTest(dtype=str(dtype)):
                t = h.new_cpu_locked_tensor(4099, torch.empty(0, dtype=dtype))
                self.assertEqual(t.dtype, dtype)
                self.assertEqual(t.numel(), 4099)
                self.assertEqual(t.data_ptr() % (2 << 20), 0)  # huge-page aligned
                src = torch.arange(4099).to(dtype)
                t.copy_(src)
                self.assertTrue(torch.equal(t * 2, src * 2))
                view = t.view(-1)[5:10]
                self.assertTrue(torch.equal(view, src[5:10]))
                path = self.scratch.file(f"pinned_{dtype}.bin")
                h.sync_pwrite(t, path, 0)
                back = h.new_cpu_locked_tensor(4099, t)
                h.async_pread(back, path, 0)
                h.wait()
                self.assertTrue(torch.equal(back, src))
                self.assertTrue(h.free_cpu_locked_tensor(back))
                self.assertFalse(h.free_cpu_locked_tensor(back))
                self.assertFalse(h.free_cpu_locked_tensor(torch.zeros(3)))
        self.assertEqual(h.new_cpu_locked_tensor(0, torch.zeros(1)).numel(), 0)

    def test_memory_outlives_handle_and_base_tensor(self):
        h = make_handle(self, "libaio")
        t = h.new_cpu_locked_tensor(1 << 20, torch.zeros(1))
        t.fill_(3.0)
        view = t[100:200]
        h.free_cpu_locked_tensor(t)
        del t, h
        gc.collect()
        filler = [torch.full((1 << 20,), 7.0) for _ in range(4)]  # reuse freed memory if any
        self.assertTrue(torch.equal(view, torch.full((100,), 3.0)))
        del filler


if __name__ == "__main__":
    unittest.main(verbosity=2 if "-v" in sys.argv else 1)
