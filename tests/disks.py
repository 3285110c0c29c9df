"""A real full disk for tests: fill a (tmpfs) file system to its last byte."""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path

import pytest


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; returns the filler file."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle:
        for chunk in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while handle.write(b"\xff" * chunk):
                    pass
    with pytest.raises(OSError) as full, (directory / "probe").open("wb", buffering=0) as probe:
        probe.write(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    (directory / "probe").unlink(missing_ok=True)
    return filler
