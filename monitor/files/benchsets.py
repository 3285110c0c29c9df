"""Managed benchmark sets: versioned, checksummed input tensors that a check replays.

On disk, under ``settings.store.benchsets_dir`` (the *root*)::

    <root>/<name>/v1/manifest.yaml      one directory per version; the highest N is current
    <root>/<name>/v1/s00000_0.npy       sample 0, input 0 (file names never carry input names)
    <root>/<name>/v2/...
    <root>/<name>/.tmp-v3-xxxx/         a version being written; ignored by every reader

``manifest.yaml`` holds ``format``, ``name``, ``version``, ``created_at``, ``source``,
``declaration`` (what determined the content: the source spec and the hashes of the files
read, see ``benchset_sources``) and its ``declaration_sha256``, the set's ``sha256``, and
``samples``: a list of ``{label, tensors: [{name, file, dtype, shape, sha256}]}``.

The set's ``sha256`` depends only on content: each sample hashes the canonical JSON of its
``[[name, tensor sha256], ...]``, and the set hashes those sample hashes joined by newlines.
Two versions with the same tensors have the same sha256, whatever their name or date.

A materialized version never changes: when the declaration's hash differs from the current
version's, ``materialize`` writes version N+1 and leaves N readable. A version is written
into a temporary directory beside the others, every file fsynced, then renamed into place,
so a crash never leaves a half-written version. Readers treat the manifest as untrusted:
paths escaping the version directory, symlinks leading out, non-numeric dtypes, wrong
checksums and truncated files all raise ``BenchsetError`` (see ``monitor.files.tensors``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import ValidationError

from monitor.config.settings import BenchsetConfig
from monitor.errors import BenchsetError
from monitor.files.benchset_sources import (
    Sample,
    build,
    declaration,
    declaration_sha256,
    read_onnx_test_inputs,
    read_onnx_test_outputs,
)
from monitor.files.signature import InputSpec, check_inputs_fit, model_signature
from monitor.files.tensors import fsync_dir, is_plain_dtype, load_npy, resolve_inside, save_npy, sha256_bytes

__all__ = [
    "Benchset",
    "InputSpec",
    "TensorEntry",
    "check_inputs_fit",
    "ensure",
    "import_files",
    "list_benchsets",
    "materialize",
    "model_signature",
    "open_benchset",
    "read_onnx_test_inputs",
    "read_onnx_test_outputs",
    "verify",
]

log = logging.getLogger(__name__)
MANIFEST = "manifest.yaml"
FORMAT = 1
IMPORT_KINDS = {"npz": "npz", "onnx-test-data": "onnx_test_data", "polygraphy-json": "polygraphy_json"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_DIR = re.compile(r"^v(\d+)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of one sample: input name, file relative to the version dir, dtype, shape, sha256."""

    name: str
    file: str
    dtype: str
    shape: tuple[int, ...]
    sha256: str


@dataclass(frozen=True)
class Benchset:
    """One materialized version of a benchmark set, as its manifest describes it."""

    name: str
    version: int
    directory: Path
    sha256: str
    created_at: str
    source: str
    declaration_sha256: str
    samples: tuple[tuple[TensorEntry, ...], ...]
    labels: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.samples)

    def load_sample(self, index: int, *, verify: bool = True) -> dict[str, np.ndarray[Any, Any]]:
        """Sample ``index`` as ``{input name: array}``; with ``verify``, every file's sha256 is checked."""
        if not 0 <= index < len(self.samples):
            raise BenchsetError(f"benchset {self.name!r} v{self.version} has samples 0..{len(self) - 1}, not {index}")
        sample = {}
        for entry in self.samples[index]:
            path = resolve_inside(self.directory, entry.file, what=f"benchset {self.name!r} v{self.version}")
            sample[entry.name] = load_npy(
                path,
                expect_dtype=entry.dtype,
                expect_shape=entry.shape,
                expect_sha256=entry.sha256 if verify else None,
            )
        return sample

    def iter_samples(self) -> Iterator[dict[str, np.ndarray[Any, Any]]]:
        """Every sample in order, each verified against its checksum."""
        for index in range(len(self.samples)):
            yield self.load_sample(index)


def materialize(cfg: BenchsetConfig, root: Path, *, clock: Callable[[], datetime] | None = None) -> Benchset:
    """The current version of a declared set, writing a new version first if the declaration changed."""
    return _materialize(cfg, root, clock or _utcnow)[0]


def ensure(cfg: BenchsetConfig, root: Path) -> Benchset:
    """What a check calls on first use of a set: materialize it if needed, else open it."""
    return materialize(cfg, root)


def open_benchset(root: Path, name: str, version: int | None = None) -> Benchset:
    """Version ``version`` of set ``name`` (the newest by default), read from its manifest."""
    set_dir = _set_dir(root, name)
    versions = _versions(set_dir)
    if not versions:
        known = [b.name for b in list_benchsets(root)]
        raise BenchsetError(f"no benchset {name!r} in {root}; benchsets are {known}")
    chosen = versions[-1] if version is None else version
    if chosen not in versions:
        raise BenchsetError(f"benchset {name!r} has no version {chosen}; versions are {versions}")
    return _read_manifest(set_dir / f"v{chosen}", name, chosen)


def verify(bs: Benchset) -> list[str]:
    """Re-hash every tensor of ``bs``; the problems found, one line each (empty when all is well)."""
    problems = []
    expected = _set_sha256(bs.samples)
    if expected != bs.sha256:
        problems.append(f"{bs.directory / MANIFEST}: sha256 {bs.sha256} does not match its samples ({expected})")
    for entries in bs.samples:
        for entry in entries:
            try:
                path = resolve_inside(bs.directory, entry.file, what=f"benchset {bs.name!r} v{bs.version}")
                load_npy(path, expect_dtype=entry.dtype, expect_shape=entry.shape, expect_sha256=entry.sha256)
            except BenchsetError as exc:
                problems.append(str(exc))
    return problems


def list_benchsets(root: Path, *, all_versions: bool = False) -> list[Benchset]:
    """Every set under ``root`` (its newest version, or all of them), by name; unreadable ones are logged."""
    if not root.is_dir():
        return []
    found = []
    for set_dir in sorted(p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name)):
        versions = _versions(set_dir)
        for version in versions if all_versions else versions[-1:]:
            try:
                found.append(_read_manifest(set_dir / f"v{version}", set_dir.name, version))
            except BenchsetError as exc:
                log.warning("skipping unreadable benchset: %s", exc)
    return found


def import_files(
    name: str, files: Sequence[Path], root: Path, kind: str, *, clock: Callable[[], datetime] | None = None
) -> Benchset:
    """Materialize a set from files (``npz``, ``onnx-test-data`` or ``polygraphy-json``) given by hand."""
    source = IMPORT_KINDS.get(kind) or (kind if kind in IMPORT_KINDS.values() else None)
    if source is None:
        raise BenchsetError(f"unknown import kind {kind!r}; kinds are {sorted(IMPORT_KINDS)}")
    paths = [Path(f).resolve() for f in files]
    if not paths:
        raise BenchsetError("benchset import needs at least one file")
    if source != "npz" and len(paths) != 1:
        raise BenchsetError(f"import kind {kind!r} takes exactly one path, got {len(paths)}")
    value: Any = paths if source == "npz" else paths[0]
    try:
        cfg = BenchsetConfig.model_validate({"name": name, source: value})
    except ValidationError as exc:
        raise BenchsetError(f"benchset name {name!r} is invalid: {exc.errors()[0]['msg']}") from None
    return materialize(cfg, root, clock=clock)


def _materialize(cfg: BenchsetConfig, root: Path, clock: Callable[[], datetime]) -> tuple[Benchset, bool]:
    decl = declaration(cfg)
    decl_sha = declaration_sha256(decl)
    set_dir = _set_dir(root, cfg.name)
    versions = _versions(set_dir)
    if versions:
        current = _read_manifest(set_dir / f"v{versions[-1]}", cfg.name, versions[-1])
        if current.declaration_sha256 == decl_sha:
            return current, False
    samples, labels = build(cfg)
    if not samples:
        raise BenchsetError(f"benchset {cfg.name!r}: source {cfg.source} yielded no samples")
    for _ in range(10):  # another process may take version N first: then try N+1
        version = (versions[-1] if versions else 0) + 1
        try:
            return _write_version(set_dir, cfg, version, decl, decl_sha, samples, labels, clock()), True
        except FileExistsError:
            versions = _versions(set_dir)
            current = _read_manifest(set_dir / f"v{versions[-1]}", cfg.name, versions[-1])
            if current.declaration_sha256 == decl_sha:
                return current, False
    raise BenchsetError(f"benchset {cfg.name!r}: could not claim a new version in {set_dir}")


def _write_version(
    set_dir: Path,
    cfg: BenchsetConfig,
    version: int,
    decl: dict[str, Any],
    decl_sha: str,
    samples: list[Sample],
    labels: list[str],
    now: datetime,
) -> Benchset:
    set_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-v{version}-", dir=set_dir))
    try:
        rows = []
        for index, sample in enumerate(samples):
            row = []
            for position, (input_name, raw) in enumerate(sample.items()):
                array = np.asarray(raw)
                file = f"s{index:05d}_{position}.npy"
                sha = save_npy(tmp / file, array)
                row.append(TensorEntry(input_name, file, array.dtype.name, tuple(array.shape), sha))
            rows.append(tuple(row))
        bs = Benchset(
            name=cfg.name,
            version=version,
            directory=set_dir / f"v{version}",
            sha256=_set_sha256(rows),
            created_at=now.isoformat(timespec="seconds"),
            source=cfg.source,
            declaration_sha256=decl_sha,
            samples=tuple(rows),
            labels=tuple(labels),
        )
        _write_manifest(tmp / MANIFEST, bs, decl)
        fsync_dir(tmp)
        try:
            os.rename(tmp, bs.directory)
        except OSError as exc:
            if bs.directory.exists():
                raise FileExistsError(str(bs.directory)) from exc
            raise
        fsync_dir(set_dir)
        return bs
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _write_manifest(path: Path, bs: Benchset, decl: dict[str, Any]) -> None:
    manifest = {
        "format": FORMAT,
        "name": bs.name,
        "version": bs.version,
        "created_at": bs.created_at,
        "source": bs.source,
        "sha256": bs.sha256,
        "declaration_sha256": bs.declaration_sha256,
        "declaration": decl,
        "samples": [
            {
                "label": label,
                "tensors": [
                    {"name": e.name, "file": e.file, "dtype": e.dtype, "shape": list(e.shape), "sha256": e.sha256}
                    for e in entries
                ],
            }
            for label, entries in zip(bs.labels, bs.samples, strict=True)
        ],
    }
    with open(path, "w", encoding="utf-8") as fp:
        yaml.safe_dump(manifest, fp, sort_keys=False, allow_unicode=True)
        fp.flush()
        os.fsync(fp.fileno())


def _read_manifest(version_dir: Path, name: str, version: int) -> Benchset:
    path = version_dir / MANIFEST
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchsetError(f"benchset manifest {path} not found") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BenchsetError(f"benchset manifest {path} cannot be read: {exc}") from None
    field = _Fields(path, raw)
    if field.get("format", int) != FORMAT:
        raise BenchsetError(f"{path}: format {raw['format']} is not supported (expected {FORMAT})")
    if field.get("name", str) != name or field.get("version", int) != version:
        raise BenchsetError(f"{path}: says {raw['name']!r} v{raw['version']}, expected {name!r} v{version}")
    samples, labels = [], []
    for i, item in enumerate(field.get("samples", list)):
        sample = _Fields(path, item, f"samples[{i}]")
        labels.append(str(sample.get("label", str)))
        entries = []
        for k, tensor in enumerate(sample.get("tensors", list)):
            entries.append(_parse_entry(path, tensor, f"samples[{i}].tensors[{k}]", version_dir))
        samples.append(tuple(entries))
    sha = field.get("sha256", str)
    decl_sha = field.get("declaration_sha256", str)
    for key, value in (("sha256", sha), ("declaration_sha256", decl_sha)):
        if not _SHA256.match(value):
            raise BenchsetError(f"{path}: {key} must be 64 lowercase hex digits, got {value!r}")
    return Benchset(
        name=name,
        version=version,
        directory=version_dir,
        sha256=sha,
        created_at=str(field.get("created_at", str)),
        source=field.get("source", str),
        declaration_sha256=decl_sha,
        samples=tuple(samples),
        labels=tuple(labels),
    )


def _parse_entry(path: Path, raw: Any, where: str, version_dir: Path) -> TensorEntry:
    field = _Fields(path, raw, where)
    file = field.get("file", str)
    resolve_inside(version_dir, file, what=f"{path}: {where}.file")
    dtype = field.get("dtype", str)
    try:
        plain = is_plain_dtype(np.dtype(dtype))
    except (TypeError, ValueError, SyntaxError):  # np.dtype parses strings like "i4, (" with eval-like code
        plain = False
    if not plain:
        raise BenchsetError(f"{path}: {where}.dtype {dtype!r} is not a plain numeric/bool dtype")
    shape = field.get("shape", list)
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise BenchsetError(f"{path}: {where}.shape must be a list of non-negative integers, got {shape!r}")
    sha = field.get("sha256", str)
    if not _SHA256.match(sha):
        raise BenchsetError(f"{path}: {where}.sha256 must be 64 lowercase hex digits, got {sha!r}")
    return TensorEntry(field.get("name", str), file, np.dtype(dtype).name, tuple(shape), sha)


class _Fields:
    """Typed access to one mapping of an untrusted manifest, with errors naming file and field."""

    def __init__(self, path: Path, raw: Any, where: str = "") -> None:
        if not isinstance(raw, dict):
            raise BenchsetError(f"{path}: {where or 'top level'} must be a mapping, got {type(raw).__name__}")
        self.path, self.raw, self.where = path, raw, where

    def get(self, key: str, kind: type[Any]) -> Any:
        label = f"{self.where}.{key}" if self.where else key
        if key not in self.raw:
            raise BenchsetError(f"{self.path}: {label} is missing")
        value = self.raw[key]
        if kind is str and isinstance(value, datetime):  # YAML reads an unquoted timestamp as a datetime
            value = value.isoformat()
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise BenchsetError(f"{self.path}: {label} must be a {kind.__name__}, got {type(value).__name__}")
        return value


def _set_sha256(samples: Sequence[Sequence[TensorEntry]]) -> str:
    sample_hashes = [
        sha256_bytes(json.dumps([[e.name, e.sha256] for e in entries], separators=(",", ":")).encode())
        for entries in samples
    ]
    return sha256_bytes("\n".join(sample_hashes).encode())


def _set_dir(root: Path, name: str) -> Path:
    if not _NAME.match(name):
        raise BenchsetError(f"benchset name {name!r} must match {_NAME.pattern}")
    return root / name


def _versions(set_dir: Path) -> list[int]:
    if not set_dir.is_dir():
        return []
    found = (_VERSION_DIR.match(p.name) for p in set_dir.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


def _utcnow() -> datetime:
    return datetime.now(UTC)
