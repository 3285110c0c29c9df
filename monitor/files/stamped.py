"""Stat stamps, and the table of file digests a check worker keeps by them.

A file's *stamp* is ``os.stat``'s size, mtime_ns, ctime_ns, inode and device (no read). Any write
moves the ctime (a process can set the mtime back, never the ctime), and a file replaced by another
has another inode. ``Digests`` is the one table a check worker keeps of its files between checks:
``path -> (stamp, digests)``, so an unchanged model file (gigabytes, with its external data) is not
read and hashed again at every check (for the model file the digests come with the facts of its
header, read from the same bytes: ``modelfile.identify``). An entry is answered only while the file
shows the stamp it was read under; it is kept only when the file showed the same stamp before and
after it was read, and only once the file has been unchanged for ``SETTLE_NS`` (a second write in
the same tick of the kernel's coarse clock would leave the stamp as it was: git's "racily clean"
rule). Every other file a check uses is read at every check.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

Stat = Callable[[Any], os.stat_result]
StampEntry = tuple[str, int, int, int, int, int]
Stamp = tuple[StampEntry, ...]
SETTLE_NS = 2_000_000_000  # a digest is kept only of a file unchanged this long before it was read
T = TypeVar("T")


def stamp(paths: Sequence[Path | str], stat: Stat = os.stat) -> Stamp | None:
    """``os.stat`` facts (following symlinks) of every path; None when one is missing or unreadable."""
    entries = []
    for path in paths:
        try:
            st = stat(path)
        except (OSError, ValueError):
            return None
        entries.append((str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
    return tuple(entries)


class Digests:
    """``path -> (stamp, digest)``: a file's digest, computed again only when its stamp moved."""

    def __init__(self, stat: Stat = os.stat) -> None:
        self._stat = stat  # injected: a test stands in a file system whose timestamps do not move
        self._table: dict[str, tuple[Stamp, Any]] = {}
        self.computed = 0  # digests computed (files read), for a check's details and the tests

    def digest(self, path: Path, compute: Callable[[Path], T]) -> T:
        """``compute(path)``, or what it gave while ``path`` still shows the same stamp."""
        key = str(path)
        before = stamp([key], self._stat)
        kept = self._table.get(key)
        if kept is not None and before is not None and kept[0] == before:
            return cast(T, kept[1])
        self._table.pop(key, None)
        value = compute(path)  # raises for a missing or unreadable file: never kept
        self.computed += 1
        if before is not None and before == stamp([key], self._stat) and _settled(before[0]):
            self._table[key] = (before, value)
        return value

    def __len__(self) -> int:
        return len(self._table)


def _settled(entry: StampEntry) -> bool:
    """Whether the file last changed more than ``SETTLE_NS`` ago (see the module's docstring)."""
    return max(entry[2], entry[3]) < time.time_ns() - SETTLE_NS
