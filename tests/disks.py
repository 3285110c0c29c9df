"""A real full disk for tests: fill a (tmpfs) file system to its last byte."""

from __future__ import annotations

import contextlib
import errno
import shutil
import subprocess
from collections.abc import Iterator
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


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``where`` (root only; the test is skipped where mount is refused)."""
    where.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount binary")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
