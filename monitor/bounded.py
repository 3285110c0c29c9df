"""Reading a file that a user or a crash could have replaced: regular files only, bounded, never blocking.

Every file onnxmon reads from a place a person (or a half-finished write) controls goes through here:
the config file, ``store.url_file``, ``api.token_file``, spool entries, tensor and model files. A FIFO
opened for reading blocks until a writer comes; ``/dev/zero`` never ends; a 1 GB "secret" fills the
memory. So the file is opened with ``O_NONBLOCK`` (a FIFO opens at once), examined with ``fstat`` on
the descriptor actually opened (a symlink is judged by what it points at, and nothing can be swapped
in between), refused unless it is a regular file, refused unless its size is within the caller's
limit, and only then read, never past ``limit + 1`` bytes (a file grown past the limit meanwhile is refused
too) and never asking for ``limit`` bytes up front (``read(n)`` allocates ``n``).

A refusal is ``FileRefused``, an ``OSError`` whose ``str()`` is one line naming the file and why, so
callers that already turn ``OSError`` into a one-line message keep doing so. Standard library only:
``config/`` sits just above the vocabulary and needs this to read the config file itself.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import IO

__all__ = ["FileRefused", "kind_of", "not_regular", "open_regular", "read_bytes", "read_text"]


class FileRefused(OSError):
    """A file refused before it was read: not a regular file, or larger than its limit."""

    def __init__(self, path: str | os.PathLike[str], why: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, why, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def kind_of(mode: int) -> str:
    """What a file of ``mode`` is, in words: ``a FIFO``, ``a character device``, ``a directory``..."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not a regular file, as the end of a sentence ("not found", "is not a regular file (a FIFO)").

    ``None`` for a regular file. For a check before a read, so that a FIFO or a device a user named is
    called one, not "not found" (a symlink is judged by what it points at; a dangling one is not found).
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else f"is not a regular file ({kind_of(mode)})"


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open ``path`` for reading if it is a regular file; ``FileRefused`` (or the open's ``OSError``) otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(path, f"not a regular file ({kind_of(mode)})")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused (``FileRefused``) when it holds more than ``limit``."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise FileRefused(path, f"larger than {_size(limit)} ({_size(size)})", errno.EFBIG)
        # read(n) allocates n bytes up front: ask for what fstat says is there, not the limit; a file that
        # grows meanwhile (or reports size 0) is read on in 1 MiB pieces, never past limit + 1 bytes
        parts = [handle.read(min(size, limit) + 1)]
        total = len(parts[0])
        while total <= limit and (more := handle.read(min(1 << 20, limit + 1 - total))):
            parts.append(more)
            total += len(more)
    if total > limit:
        raise FileRefused(path, f"larger than {_size(limit)}", errno.EFBIG)
    return b"".join(parts)


def read_text(path: str | os.PathLike[str], *, limit: int) -> str:
    """``read_bytes`` decoded as UTF-8 (``UnicodeDecodeError`` when it is not)."""
    return read_bytes(path, limit=limit).decode("utf-8")


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.4g} {unit}"
    return f"{count} bytes"
