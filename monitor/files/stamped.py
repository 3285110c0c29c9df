"""Files a warm check worker keeps verified between checks: the stat stamp rule, in one place.

A fresh check reads, parses and hashes every file it uses (the model, the benchmark set's
tensors, the baseline's outputs). A warm worker (``daemon.worker: warm``) checks one model again
and again; re-reading unchanged files is most of a small model's check. The rule, the same for
the model file (``runtime/kept.py``) and for every tensor file:

- a file's *stamp* is ``os.stat``'s size, mtime_ns, ctime_ns, inode and device (no read); a kept
  value (a resolved path, a decoded and verified array, a header's shape) is used only while the
  stamp of the file it came from is unchanged: any difference, and the file is read and verified
  again at this check;
- every ``rehash_every`` checks everything kept is dropped and read and hashed in full, for what a
  stamp cannot see (a file system with coarse timestamps, a write that restored mtime and ctime);
- a parsed manifest is kept while the manifest file's stamp is unchanged (what it promises is
  still checked against every tensor file it names, each by its own stamp); so is a benchmark set's
  list of versions, on its directory's stamp (adding, removing or renaming a version directory
  changes the directory's mtime); nothing parsed from a file changed in the last ``SETTLE_NS`` is
  kept (a second change in the same clock tick would not move the stamp);
- within one check a file is stat'ed once (``KeptFiles.now``): the stamp seen first is the one every
  kept value of that file is checked against for the rest of the check (a file that changes
  during a check is seen at the next one); a file read afresh is stat'ed again after the read, so
  what changed while it was read is never kept;
- decoded arrays are kept only within ``budget_bytes`` (the rest is read and verified every check,
  as in a fresh check), so the worker's memory stays bounded; kept arrays are read-only;
- a *bundle* (one sample's inputs, one sample's baseline outputs: ``KeptFiles.bundle``) is what
  one call built from several kept values; it is answered again while its owner (the kept
  manifest or ``baseline.json`` it was built from, by identity) is the same and every file the
  build consulted still shows the stamp it had, so a steady-state check pays one dict lookup and
  one stamp comparison per file instead of a resolve and a load per file. A build that read
  anything it could not keep (over budget, unverified, changed while read) is not kept.

``FreshFiles`` is a fresh check's reader: no memory between calls, every read verified.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from monitor.errors import BenchsetError, MonitorError
from monitor.files import tensors

Stat = Callable[[Any], os.stat_result]
StampEntry = tuple[str, int, int, int, int, int]
Stamp = tuple[StampEntry, ...]
DEFAULT_BUDGET_BYTES = 256 * 1024 * 1024  # decoded arrays a warm worker keeps, at most
DEFAULT_REHASH_EVERY = 100
SETTLE_NS = 20_000_000  # a parsed value is kept only from files unchanged this long (see ``_settled``)
T = TypeVar("T")


def _settled(seen: Stamp) -> bool:
    """Whether every file of ``seen`` last changed more than ``SETTLE_NS`` ago.

    Linux stamps a change with the kernel's coarse clock (one tick, up to 10 ms): a second change
    within the same tick as the first (a version directory created just after the listing that was
    parsed) leaves mtime and ctime as they were. A value parsed from a file that changed that recently
    is not kept, so the next check parses again (git's "racily clean" rule).
    """
    recent = time.time_ns() - SETTLE_NS
    return all(max(entry[2], entry[3]) < recent for entry in seen)


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


class TensorFiles(Protocol):
    """How a check reads the tensor files of a benchmark set and a baseline."""

    def begin_check(self) -> None:
        """A new check starts: a full re-read is due every ``rehash_every`` of them."""
        ...

    def resolve(self, root: Path, relative: str, resolver: Callable[[], Path]) -> Path:
        """``resolver()`` (a containment check of ``root / relative``), or its kept answer."""
        ...

    def load_npy(self, path: Path, **expect: Any) -> np.ndarray[Any, Any]:
        """``tensors.load_npy(path, **expect)``, or the array it returned while the file is unchanged."""
        ...

    def npy_shape(self, path: Path, *, error: type[MonitorError] = BenchsetError) -> tuple[int, ...]:
        """``tensors.npy_shape``, or its kept answer."""
        ...

    def parsed(self, path: Path, parse: Callable[[], T], *, kind: str = "parsed") -> T:
        """``parse()`` (which reads and validates ``path``, a manifest), or its kept answer.

        ``kind`` tells apart two answers kept on the stamp of the same file.
        """
        ...

    def bundle(self, key: tuple[Any, ...], owner: object, build: Callable[[], dict[str, T]]) -> dict[str, T]:
        """``build()`` (which reads through this object), or a copy of its kept answer.

        Kept while ``owner`` (what the build's expectations came from) is the same object and every
        file the build consulted is unchanged.
        """
        ...


class FreshFiles:
    """Every call reads, resolves and verifies: what a fresh check does."""

    def begin_check(self) -> None:
        return None

    def resolve(self, root: Path, relative: str, resolver: Callable[[], Path]) -> Path:
        return resolver()

    def load_npy(self, path: Path, **expect: Any) -> np.ndarray[Any, Any]:
        return tensors.load_npy(path, **expect)

    def npy_shape(self, path: Path, *, error: type[MonitorError] = BenchsetError) -> tuple[int, ...]:
        return tensors.npy_shape(path, error=error)

    def parsed(self, path: Path, parse: Callable[[], T], *, kind: str = "parsed") -> T:
        return parse()

    def bundle(self, key: tuple[Any, ...], owner: object, build: Callable[[], dict[str, T]]) -> dict[str, T]:
        return build()


@dataclass
class _Entry:
    stamp: Stamp
    value: Any
    size: int = 0


@dataclass
class _Bundle:
    owner: object  # held, so that identity can never be a reused id
    consulted: tuple[tuple[str, Stamp], ...]  # every file the build stat'ed, with the stamp it saw
    value: dict[str, Any]


class KeptFiles:
    """What one warm worker keeps of its files, each value valid while its file's stamp is unchanged."""

    def __init__(
        self,
        *,
        rehash_every: int = DEFAULT_REHASH_EVERY,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        stat: Stat = os.stat,
    ) -> None:
        self.rehash_every = max(1, rehash_every)
        self._stat = stat  # injected: a test stands in a file system whose timestamps do not move
        self.budget_bytes = max(0, budget_bytes)
        self.checks = 0
        self.kept_bytes = 0
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self._seen: dict[str, Stamp | None] = {}  # this check's stamps, one os.stat per file per check
        self._bundles: dict[tuple[Any, ...], _Bundle] = {}
        self._consulted: list[tuple[str, Stamp | None]] | None = None  # while a bundle is built
        self._unkept = False  # the bundle being built read something that was not kept
        self.read = 0  # files read (not answered from memory) since the check began: for the check's note

    def begin_check(self) -> None:
        """Count a check; at the first and every ``rehash_every``-th, forget everything (a full re-read)."""
        if self.checks % self.rehash_every == 0:
            self.clear()
        self.checks += 1
        self.read = 0
        self._seen.clear()

    def now(self, path: Path | str) -> Stamp | None:
        """``path``'s stamp as this check first saw it (one ``os.stat`` per file per check)."""
        key = str(path)
        try:
            seen = self._seen[key]
        except KeyError:
            seen = self._seen[key] = stamp([key], self._stat)
        if self._consulted is not None:
            self._consulted.append((key, seen))
        return seen

    @property
    def full_check(self) -> bool:
        """Whether the current check re-reads and re-hashes every file (nothing was kept from before)."""
        return (self.checks - 1) % self.rehash_every == 0

    def clear(self) -> None:
        self._entries.clear()
        self._bundles.clear()
        self.kept_bytes = 0

    def bundle(self, key: tuple[Any, ...], owner: object, build: Callable[[], dict[str, T]]) -> dict[str, T]:
        hit = self._bundles.get(key)
        if hit is not None and hit.owner is owner and all(self.now(path) == was for path, was in hit.consulted):
            return dict(hit.value)
        self._bundles.pop(key, None)  # a stale bundle must not pin the arrays it held
        self._consulted, self._unkept = [], False  # builds do not nest: each reads plain files
        try:
            value = build()
            consulted, unkept = self._consulted, self._unkept
        finally:
            self._consulted = None
        if not unkept and all(was is not None for _, was in consulted):
            kept = tuple(dict.fromkeys((path, was) for path, was in consulted if was is not None))
            self._bundles[key] = _Bundle(owner, kept, dict(value))
        return value

    def resolve(self, root: Path, relative: str, resolver: Callable[[], Path]) -> Path:
        # The stamp of root/relative, links followed: a file or directory swapped for a link elsewhere
        # shows another inode, so the containment check runs again.
        joined = f"{root}{os.sep}{relative}"
        key = ("resolve", joined)
        now = self.now(joined)
        hit = self._entries.get(key)
        if hit is not None and now is not None and hit.stamp == now:
            return hit.value  # type: ignore[no-any-return]
        resolved = resolver()  # raises for a path that leads outside: never kept
        if now is not None:
            self._entries[key] = _Entry(now, resolved)
        return resolved

    def load_npy(self, path: Path, **expect: Any) -> np.ndarray[Any, Any]:
        key = _npy_key(path, expect)
        before = self.now(path)
        hit = self._entries.get(key)
        if hit is not None and before is not None and hit.stamp == before:
            return hit.value  # type: ignore[no-any-return]
        if hit is not None:
            self._drop(key)
        self.read += 1
        array = tensors.load_npy(path, **expect)
        after = stamp([path], self._stat)
        # Kept only when verified against a checksum, unchanged while it was read, and within budget.
        fits = self.kept_bytes + array.nbytes <= self.budget_bytes
        if expect.get("expect_sha256") and before is not None and before == after and fits:
            array.flags.writeable = False
            self._entries[key] = _Entry(before, array, array.nbytes)
            self.kept_bytes += array.nbytes
        else:
            self._unkept = True  # read again at every check: no bundle may stand in for it
        return array

    def parsed(self, path: Path, parse: Callable[[], T], *, kind: str = "parsed") -> T:
        key = (kind, str(path))
        now = self.now(path)
        hit = self._entries.get(key)
        if hit is not None and now is not None and hit.stamp == now:
            return hit.value  # type: ignore[no-any-return]
        value = parse()
        if now is not None and _settled(now) and now == stamp([path], self._stat):
            self._entries[key] = _Entry(now, value)
        return value

    def npy_shape(self, path: Path, *, error: type[MonitorError] = BenchsetError) -> tuple[int, ...]:
        key = ("shape", str(path))
        now = self.now(path)
        hit = self._entries.get(key)
        if hit is not None and now is not None and hit.stamp == now:
            return hit.value  # type: ignore[no-any-return]
        shape = tensors.npy_shape(path, error=error)
        if now is not None:
            self._entries[key] = _Entry(now, shape)
        return shape

    def note(self) -> dict[str, Any]:
        """What this check read from disk, for the check's ``details.warm``."""
        return {"files_full_check": self.full_check, "files_read": self.read, "files_kept_bytes": self.kept_bytes}

    def _drop(self, key: tuple[Any, ...]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.kept_bytes -= entry.size


def _npy_key(path: Path, expect: dict[str, Any]) -> tuple[Any, ...]:
    """What a kept array was verified against: its path and every expectation (a different one reads again).

    The plain items when they hash (the per-sample path: strings, tuples, classes), else each value
    made hashable; two spellings of one expectation are two keys, which costs a read, never a wrong hit.
    """
    plain = ("npy", str(path), *expect.items())
    try:
        hash(plain)
    except TypeError:
        return ("npy", str(path), *sorted((k, _hashable(v)) for k, v in expect.items()))
    return plain


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, type):
        return value.__qualname__
    return str(value)
