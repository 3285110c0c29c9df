"""Baselines: the stored outputs of one model on one benchmark set, with their provenance.

Layout (``root`` is ``store.baselines_dir``)::

    <root>/<model>/<baseline_id>/baseline.json      metadata + sha256 of every tensor file
    <root>/<model>/<baseline_id>/outputs/sNNNN_oKK.npy
    <root>/<model>/<baseline_id>/intermediates/...  optional, for layer-by-layer localization
    <root>/<model>/ACTIVE                           the active baseline id (one per model)
    <root>/<model>/promotions.jsonl                 who promoted what, when (append-only)

A baseline is written (``baseline_writer.py``, one sample at a time) into a temporary
directory next to its final place and renamed into place only when every file is on disk
and fsynced, so a crash or a full disk never leaves a half-written baseline, and nothing
half-written ever becomes active. Every tensor is checksummed and verified when loaded.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import functools
import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor import bounded, jsonsafe
from monitor.errors import BaselineError
from monitor.files import tensors
from monitor.files.baseline_meta import BaselineMeta, created_seconds

META_FILE = "baseline.json"
ACTIVE_FILE = "ACTIVE"
# What a baseline id may look like: one path component, never '.', '..' or hidden.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
PROMOTIONS_FILE = "promotions.jsonl"


# baseline.json (a line per tensor file), model_manifest.json, the promotion log: a bigger one is not ours
MAX_DOCUMENT_BYTES = 256 << 20


@dataclass(frozen=True)
class Baseline:
    """A baseline on disk; tensors load lazily and are verified against their sha256."""

    meta: BaselineMeta
    directory: Path

    @property
    def id(self) -> str:
        return self.meta.id

    def sample_outputs(self, index: int) -> dict[str, np.ndarray]:
        """The expected outputs of sample ``index``, each verified against its sha256."""
        result = {}
        for name, spec in self.meta.outputs.items():
            rel = output_file(index, int(spec["index"]))
            result[name] = self._load(rel)
        return result

    def element_counts(self) -> dict[str, int]:
        """Elements of every output over all samples, from the ``.npy`` headers (no data is read)."""
        counts = dict.fromkeys(self.meta.outputs, 0)
        for index in range(self.meta.sample_count):
            for name, spec in self.meta.outputs.items():
                rel = output_file(index, int(spec["index"]))
                shape = tensors.npy_shape(self._path(rel), error=BaselineError)
                counts[name] += int(np.prod(shape, dtype=object))
        return counts

    def outputs(self) -> dict[str, list[np.ndarray]]:
        """Every output over all samples: ``{name: [sample0, sample1, ...]}``."""
        per_output: dict[str, list[np.ndarray]] = {name: [] for name in self.meta.outputs}
        for index in range(self.meta.sample_count):
            for name, array in self.sample_outputs(index).items():
                per_output[name].append(array)
        return per_output

    def intermediates(self, sample: int) -> dict[str, np.ndarray]:
        """Intermediate tensors stored for ``sample`` at baseline time (compressed npz)."""
        files = self.meta.intermediates.get("files", {})
        rel = files.get(str(sample))
        if rel is None:
            stored = sorted(int(k) for k in files)
            raise BaselineError(f"baseline {self.id} has no intermediates for sample {sample}; stored: {stored}")
        path = self._path(rel)
        _verify_sha(path, self.meta.files.get(rel), self.id)
        arrays = tensors.load_npz(path, error=BaselineError, text=True)
        return {_unescape(k): v for k, v in arrays.items()}

    def verify(self) -> list[str]:
        """Re-hash every file; a list of problems (empty when intact)."""
        problems = []
        for rel, expected in self.meta.files.items():
            try:
                path = self._path(rel)  # a listed file outside the directory is reported, never read
            except BaselineError as exc:
                problems.append(str(exc))
                continue
            if not path.is_file():
                problems.append(f"{path}: missing")
            elif tensors.sha256_file(path) != expected:
                problems.append(f"{path}: sha256 does not match baseline.json")
        return problems

    def document(self, rel: str) -> dict[str, Any] | None:
        """A JSON document the baseline keeps beside its outputs (``MODEL_MANIFEST``), verified; None if absent.

        Baselines captured before a document existed simply lack it; a listed document that is
        missing, altered or not JSON is a ``BaselineError`` naming the file.
        """
        expected = self.meta.files.get(rel)
        if expected is None:
            return None
        path = self._path(rel)
        try:
            raw = bounded.read_bytes(path, limit=MAX_DOCUMENT_BYTES)
        except OSError as exc:
            raise BaselineError(f"baseline {self.id}: cannot read {path}: {exc.strerror or exc}") from None
        if hashlib.sha256(raw).hexdigest() != expected:
            raise BaselineError(f"baseline {self.id}: {path} does not match its sha256 in {META_FILE}")
        try:
            data = jsonsafe.loads(raw)  # its numbers bounded
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or a number out of range
            raise BaselineError(f"baseline {self.id}: {path} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BaselineError(f"baseline {self.id}: {path} holds {type(data).__name__}, expected an object")
        return data

    def input_mismatches(self) -> list[str]:
        """Where a reference made outside ONNX Runtime consumed other inputs than the benchmark set, described.

        ``onnxmon reference torch`` records its input check in ``REFERENCE_DOC``; a check against
        such a baseline reports each as ``input_mismatch``: a preprocessing mistake, not a drift.
        """
        if self.meta.source != "reference":
            return []
        check = (self.document(REFERENCE_DOC) or {}).get("input_check", {})
        found = check.get("mismatches", []) if isinstance(check, dict) else []
        return [str(m.get("description", ""))[:2000] for m in found if isinstance(m, dict)]

    @functools.cached_property
    def _resolved(self) -> Path:
        """The directory with its links resolved, once per ``Baseline`` (one check's reading of it)."""
        return self.directory.resolve()

    def _path(self, rel: str) -> Path:
        path = (self._resolved / rel).resolve()
        if not path.is_relative_to(self._resolved):
            raise BaselineError(f"baseline {self.id}: file {rel!r} escapes the baseline directory")
        return path

    def _load(self, rel: str) -> np.ndarray:
        expected = self.meta.files.get(rel)
        if expected is None:
            raise BaselineError(f"baseline {self.id}: {rel} is not listed in {META_FILE}")
        return tensors.load_npy(self._path(rel), expect_sha256=expected, error=BaselineError, text=True)


# The static description of the model file a baseline was captured from (``monitor.modeldiff``):
# a check of a changed file diffs against it, since the baseline keeps no copy of the model.
MODEL_MANIFEST = "model_manifest.json"
# What a reference made outside ONNX Runtime (``onnxmon reference torch``) knows about itself: the
# framework version, the factory, the module -> tensor map, and the input check that ``check`` reads.
REFERENCE_DOC = "reference.json"


def new_id(model: str, outputs_digest: str, now: dt.datetime | None = None) -> str:
    """Sortable, unique id: UTC time of capture plus a short digest of the outputs."""
    moment = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{model}-{moment}-{outputs_digest[:8]}"


def check_id(baseline_id: str, *, where: str = "baseline id") -> str:
    """``baseline_id`` if it can only name a directory inside a model's folder; ``BaselineError`` otherwise.

    Ids come from the command line, the API and ``ACTIVE`` files: ``../../elsewhere`` must never
    become a path that onnxmon reads from or writes to.
    """
    if not _ID.fullmatch(baseline_id):
        raise BaselineError(f"{where} {baseline_id!r} is not a baseline id (letters, digits, '.', '_', '-')")
    return baseline_id


def get(root: Path, baseline_id: str) -> Baseline:
    """Find a baseline by id under any model; ``BaselineError`` naming what exists otherwise."""
    check_id(baseline_id)
    for model_dir in _model_dirs(root):
        candidate = model_dir / baseline_id
        if (candidate / META_FILE).is_file():
            return _open(candidate)
    raise BaselineError(f"no baseline {baseline_id!r} under {root}")


def list_baselines(root: Path, model: str) -> list[Baseline]:
    """Every complete baseline of ``model``, oldest first."""
    model_dir = Path(root) / model
    if not model_dir.is_dir():
        return []
    found = [_open(d) for d in sorted(model_dir.iterdir()) if (d / META_FILE).is_file() and not d.name.startswith(".")]
    return sorted(found, key=lambda b: created_seconds(b.meta.created_at))  # by time, whatever the string's form


def active_id(root: Path, model: str) -> str | None:
    """The id the model's ``ACTIVE`` file names, or None; ``BaselineError`` for an unreadable or hostile one."""
    path = Path(root) / model / ACTIVE_FILE
    if not path.exists() and not path.is_symlink():  # a FIFO or a device there is refused, not "none active"
        return None
    return _read_active(path)


def _read_active(path: Path) -> str | None:
    try:
        text = bounded.read_text(path, limit=4096).strip()  # one id
    except bounded.FileRefused as exc:
        raise BaselineError(f"{path}: cannot read the active baseline id: {exc.strerror}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path}: cannot read the active baseline id: {exc}") from None
    return check_id(text, where=f"{path} names") if text else None


def active(root: Path, model: str) -> Baseline | None:
    """The active baseline of ``model``, or None when there is none."""
    baseline_id = active_id(root, model)
    if baseline_id is None:
        return None
    directory = Path(root) / model / baseline_id
    if not (directory / META_FILE).is_file():
        raise BaselineError(f"{Path(root) / model / ACTIVE_FILE} names {baseline_id!r}, which does not exist")
    return _open(directory)


class NotWritten(BaselineError):
    """A baseline file could not be written (a full disk, a read-only volume): nothing was changed.

    Nothing the command line could fix, and nothing done: exit 3. The API answers 507 Insufficient
    Storage when ``disk_full``.
    """

    exit_code = 3

    def __init__(self, message: str, *, disk_full: bool) -> None:
        super().__init__(message)
        self.disk_full = disk_full


def not_written(path: Path, exc: OSError, unchanged: str) -> NotWritten:
    """One line naming the file, why (the disk is full, said in words) and what was left as it was."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    why = f"the disk is full ({exc.strerror})" if full else (exc.strerror or str(exc))
    return NotWritten(f"cannot write {path}: {why}; {unchanged}", disk_full=full)


def promote(
    root: Path, baseline_id: str, *, by: str = "cli", note: str = "", now: dt.datetime | None = None
) -> Baseline:
    """Make ``baseline_id`` the active baseline of its model (atomic rename of the ACTIVE file).

    The promotion log (``promotions.jsonl``) keeps when, by whom and why (``note``): the store mirrors
    that record, so history dates a promotion when it happened, not when the baseline was captured.
    Both or neither: a write that fails (``NotWritten``: a full disk) puts ACTIVE and the log back as
    they were and leaves no temporary file (the previous ACTIVE is kept as a hard link, which needs no
    space, until the log has its line).
    """
    baseline = get(root, baseline_id)
    model_dir = baseline.directory.parent
    previous = active_id(root, baseline.meta.model)
    active_path, log = model_dir / ACTIVE_FILE, model_dir / PROMOTIONS_FILE
    temp = model_dir / f".{ACTIVE_FILE}.{os.getpid()}.tmp"
    kept = model_dir / f".{ACTIVE_FILE}.{os.getpid()}.previous"
    record = {
        "at": jsonsafe.timestamp(now or dt.datetime.now(dt.UTC)),
        "baseline_id": baseline_id,
        "previous": previous,
        "by": by,
        **({"note": note} if note else {}),
    }
    log_size = log.stat().st_size if log.is_file() else None
    writing, replaced = active_path, False  # the temporary file's name would tell a user nothing
    try:
        _write_synced(temp, baseline_id + "\n", "w")
        if os.path.lexists(active_path):
            os.link(active_path, kept, follow_symlinks=False)
        os.replace(temp, active_path)
        replaced, writing = True, log
        _write_synced(log, jsonsafe.dumps(record) + "\n", "a")
        tensors.fsync_dir(model_dir)
    except OSError as exc:
        _discard(temp)
        if replaced:
            _put_back(active_path, kept, log, log_size)
        unchanged = f"{previous} stays active" if previous else "no baseline was made active"
        raise not_written(writing, exc, f"nothing changed: {unchanged}") from exc
    finally:
        _discard(kept)
    return baseline


def _discard(path: Path) -> None:
    """Remove a temporary file if it is there (a read-only volume refuses even a missing one's unlink)."""
    if os.path.lexists(path):
        with contextlib.suppress(OSError):
            path.unlink()


def _write_synced(path: Path, text: str, mode: str) -> None:
    with path.open(mode, encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def _put_back(active_path: Path, kept: Path, log: Path, log_size: int | None) -> None:
    """Undo a promotion whose log line could not be written: renames and a truncation, none needs space."""
    if os.path.lexists(kept):
        os.replace(kept, active_path)
    else:
        active_path.unlink(missing_ok=True)
    if log_size is None:
        log.unlink(missing_ok=True)
    else:
        os.truncate(log, log_size)


def promotions(root: Path, model: str) -> list[dict[str, Any]]:
    """The promotion log of ``model``, oldest first."""
    path = Path(root) / model / PROMOTIONS_FILE
    if not path.is_file():
        return []
    try:
        lines = bounded.read_text(path, limit=MAX_DOCUMENT_BYTES).splitlines()
        return [jsonsafe.loads(line) for line in lines if line.strip()]  # numbers bounded
    except bounded.FileRefused as exc:
        raise BaselineError(f"{path}: cannot read the promotion log: {exc.strerror}") from None
    except (OSError, ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or a number out of range
        raise BaselineError(f"{path}: cannot read the promotion log: {exc}") from None


def last_promotion(root: Path, model: str, baseline_id: str) -> dict[str, Any] | None:
    """The newest promotion log entry that made ``baseline_id`` active (``at``, ``by``, ``note``), or None."""
    try:
        entries = promotions(root, model)
    except BaselineError:  # an unreadable log: the store records the promotion without its details
        return None
    return next((e for e in reversed(entries) if isinstance(e, dict) and e.get("baseline_id") == baseline_id), None)


def _open(directory: Path) -> Baseline:
    meta_path = directory / META_FILE
    try:
        data = jsonsafe.loads(bounded.read_text(meta_path, limit=MAX_DOCUMENT_BYTES))  # numbers bounded
    except bounded.FileRefused as exc:
        raise BaselineError(f"{meta_path}: cannot read baseline metadata: {exc.strerror}") from None
    except (OSError, ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or a number out of range
        raise BaselineError(f"{meta_path}: cannot read baseline metadata: {exc}") from None
    if not isinstance(data, dict):
        raise BaselineError(f"{meta_path}: expected a JSON object")
    return Baseline(BaselineMeta.from_dict(data, where=str(meta_path)), directory)


def _model_dirs(root: Path) -> Iterator[Path]:
    if Path(root).is_dir():
        yield from (d for d in sorted(Path(root).iterdir()) if d.is_dir())


def output_file(sample: int, output_index: int) -> str:
    return f"outputs/s{sample:04d}_o{output_index:02d}.npy"


def _verify_sha(path: Path, expected: str | None, baseline_id: str) -> None:
    if expected is None or tensors.sha256_file(path) != expected:
        raise BaselineError(f"baseline {baseline_id}: {path} does not match its sha256 in {META_FILE}")


def escape(name: str) -> str:
    # npz member names become file names inside the zip; keep tensor names reversible.
    return name.replace("%", "%25").replace("/", "%2F")


def _unescape(name: str) -> str:
    return name.replace("%2F", "/").replace("%25", "%")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        handle.write(jsonsafe.dumps(data, indent=2, sort_keys=True, default=str))
        handle.flush()
        os.fsync(handle.fileno())
