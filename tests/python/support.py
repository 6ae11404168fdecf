"""Shared by the strata Python tests: torch or a skip, scratch directories, seeds."""

import os
import shutil
import sys
import tempfile

SKIP = 77  # ctest's SKIP_RETURN_CODE for these tests


def require_torch():
    """Returns the torch module, or exits with the skip code and the reason."""
    try:
        import torch
    except ImportError as e:  # the only reason these tests skip
        print(f"SKIP: torch is not importable by {sys.executable} ({e}); "
              "Debian: apt-get install python3-torch")
        sys.exit(SKIP)
    return torch


class ScratchDir:
    """A fresh directory under $STRATA_TEST_DIR (default ./test-scratch), removed on exit."""

    def __enter__(self):
        root = os.environ.get("STRATA_TEST_DIR", os.path.join(os.getcwd(), "test-scratch"))
        os.makedirs(root, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix=f"py{os.getpid()}_", dir=root)
        return self

    def file(self, name):
        return os.path.join(self.path, name)

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def seed():
    """STRATA_TEST_SEED or a fixed default, printed so a failure can be replayed."""
    return int(os.environ.get("STRATA_TEST_SEED", "1234"))
