"""A bounded, on-disk queue of check results that could not be written to the history database.

When the database is down (PostgreSQL restarting, a network partition, a locked SQLite file)
the database sink appends each result here instead of losing it, and writes the queue back,
oldest first, once the database answers again. The queue lives on disk so that a daemon
restarted during the outage still delivers what it measured before.

Layout: one JSON file per result, ``<directory>/<sequence:012d>.json``, written to a
``.tmp-*`` file, fsynced and hard-linked into place (a link never replaces an entry another
process wrote under the same number at the same moment), so a crash never leaves a half-written entry
that a reader would see. The sequence number gives the order (numerically: past 10^12 it simply
has more digits, which the entry pattern still matches); it continues across restarts.
Each entry carries a ``key`` (a uuid) that the store keeps with the run it becomes, so an entry
written back and then left on disk by a crash (``kill -9`` between the commit and the unlink) is
recognised on the next write-back instead of being written twice.
Entries are read as files a person or a crash could have replaced (``monitor.bounded``): a FIFO,
a device, a symlink to one or an entry over ``MAX_ENTRY_BYTES`` is set aside at once, never read.
Entries are strict JSON (``monitor.jsonsafe``): a non-finite metric is the string ``"Infinity"``,
``"-Infinity"`` or ``"NaN"``, turned back into a float when read where ``CheckResult``'s types say
float (``monitor.details`` types the details and the environment), so text that spells one stays text;
entries written before that rule, with bare ``NaN``/``Infinity`` tokens, are still read. Numbers are
bounded when read (``jsonsafe.loads``): an entry with an integer beyond 2**64 or a float literal beyond
float64 is set aside like any entry that cannot be read, and the write-back goes on with the next.
An entry the database *refuses* (not an outage: a bug, a constraint), or that cannot be read, is
moved to ``failed/`` (and counted in ``set_aside``) so that one poison result cannot block the
queue; it stays on disk for a person to inspect.

The queue is bounded (``max_results``): when full, the oldest entry is dropped, logged and
counted in ``dropped``, because during a long outage the newest results matter most.

By default the queue lives where the database's own failure cannot reach it: not beside the
SQLite file (a full disk there fails both), but under ``$XDG_STATE_HOME/onnxmon/spool/`` in a
folder named by the store URL's hash (passwords masked), so two configs never share a queue.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monitor import bounded, jsonsafe
from monitor.config.dburl import mask_url
from monitor.config.settings import StoreConfig
from monitor.results import CheckResult

log = logging.getLogger("onnxmon.spool")

DEFAULT_MAX_RESULTS = 10_000
FAILED_DIR = "failed"
MAX_ENTRY_BYTES = 64 << 20  # a result with its details is kilobytes; a bigger entry is not ours
_ENTRY = re.compile(r"^(\d{12,})\.json$")
_FORMAT = 1


@dataclass(frozen=True)
class SpooledResult:
    """One queued result and the replica that measured it."""

    path: Path
    result: CheckResult
    node: str | None = None
    pod: str | None = None
    key: str | None = None  # the run's identity in the store (None: an entry written before keys)


class Spool:
    """The queue in ``directory`` (created on first use); safe to share between threads."""

    def __init__(self, directory: Path, *, max_results: int = DEFAULT_MAX_RESULTS) -> None:
        if max_results < 1:
            raise ValueError(f"spool max_results must be >= 1, got {max_results}")
        self.directory = Path(directory)
        self.max_results = max_results
        self.dropped = 0
        self.set_aside = 0  # entries moved to failed/ since start: unreadable, or refused by the database
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries())

    @property
    def full(self) -> bool:
        return len(self) >= self.max_results

    def entries(self) -> list[Path]:
        """Queued entry files, oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted((p for p in self.directory.iterdir() if _ENTRY.match(p.name)), key=_sequence)

    def append(
        self, result: CheckResult, *, node: str | None = None, pod: str | None = None, key: str | None = None
    ) -> Path:
        """Queue ``result`` durably; when the queue is full, drop (and count) the oldest entry first.

        ``key`` is the run's identity (a fresh uuid unless an entry moved from another queue keeps its
        own). An entry too big to be read back is refused here (``OSError``), while the caller can still
        report the result, rather than set aside later.
        """
        payload = {"format": _FORMAT, "key": key or uuid.uuid4().hex, "node": node, "pod": pod}
        payload["result"] = result.to_dict()
        data = jsonsafe.dumps(payload, default=str).encode("utf-8")
        if len(data) > MAX_ENTRY_BYTES:
            raise bounded.FileRefused(self.directory, f"a spool entry of {len(data)} bytes is over the limit")
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            entries = self.entries()
            while len(entries) >= self.max_results:
                oldest = entries.pop(0)
                oldest.unlink(missing_ok=True)
                self.dropped += 1
                log.error(
                    "result spool %s is full (%d): dropped the oldest, %s", self.directory, self.max_results, oldest
                )
            sequence = _sequence(entries[-1]) + 1 if entries else 1
            temp = self.directory / f".tmp-{sequence:012d}-{os.getpid()}-{os.urandom(4).hex()}"
            try:
                with temp.open("wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                final = _claim(temp, self.directory, sequence)
            finally:
                temp.unlink(missing_ok=True)
            _fsync_dir(self.directory)
        return final

    def read(self, path: Path) -> SpooledResult:
        """Decode one entry; ``ValueError`` naming the file when it is not a spooled result."""
        try:
            raw = bounded.read_bytes(path, limit=MAX_ENTRY_BYTES)
            payload = jsonsafe.loads(raw.decode("utf-8"))  # numbers bounded; floats where CheckResult's types say
            if not isinstance(payload, Mapping) or payload.get("format") != _FORMAT:
                raise ValueError(f"expected a JSON object with format {_FORMAT}")
            result = CheckResult.from_dict(payload["result"])
        except bounded.FileRefused as exc:
            raise ValueError(f"spool entry {path} cannot be read: {exc.strerror}") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError, ArithmeticError) as exc:
            # anything a hostile file makes the decoder raise (a 200k-deep array is a RecursionError; an
            # integer beyond a float's range, which jsonsafe.loads already refuses, an OverflowError)
            raise ValueError(f"spool entry {path} cannot be read: {type(exc).__name__}: {exc}"[:1000]) from None
        # An entry from before keys gets one from its bytes: the same file always names the same run.
        key = _text(payload.get("key")) or hashlib.sha256(raw).hexdigest()[:32]
        return SpooledResult(path, result, _text(payload.get("node")), _text(payload.get("pod")), key)

    def drain(
        self, write: Callable[[SpooledResult], Any], *, transient: Callable[[BaseException], bool]
    ) -> tuple[int, BaseException | None]:
        """Hand entries to ``write`` oldest first, removing each once written.

        Stops at the first failure that ``transient`` calls an outage and returns it; an entry
        that cannot be decoded or that the database refuses for another reason is moved to
        ``failed/`` and the drain goes on. Returns ``(written, outage or None)``.
        """
        written = 0
        for path in self.entries():
            try:
                entry = self.read(path)
            except ValueError as exc:
                self._set_aside(path, str(exc))
                continue
            try:
                write(entry)
            except Exception as exc:
                if transient(exc):
                    return written, exc
                self._set_aside(path, f"{type(exc).__name__}: {exc}")
                continue
            path.unlink(missing_ok=True)
            written += 1
        return written, None

    def adopt(self, directory: Path) -> int:
        """Move the entries of another queue (e.g. the default of an older version) to this one's tail."""
        other = Spool(directory)
        moved = 0
        for path in other.entries():
            try:
                entry = other.read(path)
            except ValueError as exc:
                other._set_aside(path, str(exc))
                continue
            self.append(entry.result, node=entry.node, pod=entry.pod, key=entry.key)
            path.unlink(missing_ok=True)
            moved += 1
        if moved:
            log.warning("moved %d spooled result(s) from %s to %s", moved, directory, self.directory)
        return moved

    def keep_refused(self, result: CheckResult, *, node: str | None, pod: str | None, why: str) -> Path:
        """Write ``result``, which the database refused, straight into ``failed/`` for a person to inspect."""
        folder = self.directory / FAILED_DIR
        folder.mkdir(parents=True, exist_ok=True)
        payload = {"format": _FORMAT, "key": uuid.uuid4().hex, "node": node, "pod": pod, "refused": why[:500]}
        payload["result"] = result.to_dict()
        path = folder / f"refused-{int(time.time() * 1000):015d}-{os.urandom(4).hex()}.json"
        temp = folder / f".tmp-{path.name}"
        try:
            with temp.open("wb") as handle:
                handle.write(jsonsafe.dumps(payload, default=str).encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
        log.error("result of %r refused by the database, kept in %s: %s", result.model, path, why[:500])
        return path

    def failed(self) -> list[Path]:
        """Entries set aside because the database refused them, oldest first."""
        folder = self.directory / FAILED_DIR
        return sorted(folder.iterdir()) if folder.is_dir() else []

    def _set_aside(self, path: Path, why: str) -> None:
        """Move ``path`` (whatever it is: a FIFO, a device link, a directory) into ``failed/``; never opens it.

        Never raises: a name already taken there gets a suffix, and an entry that cannot be moved at all
        is logged and left, since a poison entry must not stop the write-back of the others.
        """
        folder = self.directory / FAILED_DIR
        try:
            folder.mkdir(exist_ok=True)
            target = folder / path.name
            if target.exists() or target.is_symlink():
                target = folder / f"{path.name}.{os.urandom(4).hex()}"
            os.replace(path, target)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("spooled result %s cannot be set aside in %s (%s): %s", path.name, folder, exc, why[:500])
            return
        self.set_aside += 1
        log.error("spooled result %s set aside in %s: %s", path.name, folder, why[:500])


def default_directory(store_url: str, environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/onnxmon/spool/<first 16 hex of sha256(store URL, password masked)>``.

    ``XDG_STATE_HOME`` unset, empty or relative (the XDG spec ignores relative ones) is
    ``~/.local/state``. Off the database's volume, and one folder per database.
    """
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or ""
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    digest = hashlib.sha256(mask_url(store_url).encode("utf-8")).hexdigest()[:16]
    return base / "onnxmon" / "spool" / digest


def configured(store: StoreConfig) -> Spool:
    """The spool of a configured store, for the daemon and the CLI alike (one queue per database).

    ``store.spool_dir`` when set, else ``default_directory``; a backlog left where onnxmon 0.1
    spooled by default is moved in first, so an upgrade never orphans queued results.
    """
    spool = Spool(Path(store.spool_dir or default_directory(store.url)), max_results=store.spool_max_results)
    legacy = legacy_directory(store.url, store.baselines_dir)
    if store.spool_dir is None and legacy != spool.directory and legacy.is_dir():
        try:
            spool.adopt(legacy)
        except OSError as exc:
            log.error("could not move the spooled results of %s to %s: %s", legacy, spool.directory, exc)
    return spool


def legacy_directory(store_url: str, baselines_dir: Path) -> Path:
    """Where onnxmon 0.1 put the spool by default: beside a SQLite file, else beside the baselines directory."""
    if store_url.startswith("sqlite:///"):
        file = store_url.removeprefix("sqlite:///").split("?", 1)[0]
        if file and file != ":memory:":
            path = Path(file)
            return path.with_name(path.name + ".spool")
    return Path(baselines_dir).parent / "spool"


def _claim(temp: Path, directory: Path, sequence: int) -> Path:
    """Give the written ``temp`` the first free sequence number from ``sequence`` on, never overwriting.

    Another process (a daemon and a hand-run ``check`` share a spool) may take the same number at the
    same moment: a hard link fails on a name that exists, where a rename would replace that result.
    """
    while True:
        final = directory / f"{sequence:012d}.json"
        try:
            os.link(temp, final)
            return final
        except FileExistsError:
            sequence += 1


def _sequence(path: Path) -> int:
    return int(path.name.removesuffix(".json"))


def _text(value: Any) -> str | None:
    return str(value) if value else None


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
