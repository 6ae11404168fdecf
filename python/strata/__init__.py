"""Strata from Python: async NVMe I/O and SIMD CPU optimizers for PyTorch users.

    strata.aio.Handle      DeepSpeed's aio_handle API (async_pread/async_pwrite/wait, ...)
    strata.optim.CPUAdam   a torch.optim.Optimizer on Strata's SIMD kernel (also CPUAdagrad,
                           CPULion), DeepSpeedCPUAdam's hyperparameters

The compiled part (strata._C) does not link libtorch: tensors are read through their Python API,
so it works with any torch version (and with NumPy arrays or buffers for I/O). strata.optim
imports torch on first use. See docs/python.md.
"""

import importlib as _importlib

from . import _C  # noqa: F401  (loads the compiled module)
from . import aio

__version__ = "0.1.0"
__all__ = ["aio", "optim"]


def __getattr__(name):
    # strata.optim needs torch; importing strata alone does not.
    if name == "optim":
        return _importlib.import_module(".optim", __name__)
    raise AttributeError(f"module 'strata' has no attribute {name!r}")
