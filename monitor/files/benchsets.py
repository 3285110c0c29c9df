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
a malformed manifest, YAML aliases, paths escaping the version directory, symlinks leading
out, non-numeric dtypes, wrong checksums and truncated files all raise ``BenchsetError``
(see ``monitor.files.benchset_manifest`` for the schema, ``monitor.files.tensors`` for files).

A model is read once per ``materialize``: its input signature feeds both the declaration
(whose hash decides whether a new version is needed) and the generator.
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
from pydantic import ValidationError

from monitor.config.settings import BenchsetConfig
from monitor.errors import BenchsetError, MonitorError
from monitor.files.benchset_generate import Sample
from monitor.files.benchset_manifest import (
    FORMAT,
    MANIFEST,
    Manifest,
    ManifestSample,
    TensorEntry,
    describe_errors,
    read_manifest,
    write_manifest,
)
from monitor.files.benchset_sources import (
    build,
    declaration,
    declaration_sha256,
    read_onnx_test_inputs,
    read_onnx_test_outputs,
    read_signature,
)
from monitor.files.signature import InputSpec, check_inputs_fit, model_signature
from monitor.files.tensors import fsync_dir, load_npy, resolve_inside, save_npy, sha256_bytes
from monitor.results import CheckResult

__all__ = [
    "FORMAT",
    "MANIFEST",
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
IMPORT_KINDS = {"npz": "npz", "onnx-test-data": "onnx_test_data", "polygraphy-json": "polygraphy_json"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VERSION_DIR = re.compile(r"^v(\d+)$")


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
    version_dir = set_dir / f"v{chosen}"
    return _read_manifest(version_dir, name, chosen)


def newest_version(root: Path, name: str) -> int | None:
    """The highest version number of set ``name`` on disk (its directory listing only), or None."""
    versions = _versions(_set_dir(root, name))
    return versions[-1] if versions else None


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
    if cfg.imported:  # made by `benchset import`: nothing to materialize, the newest version is the set
        return open_benchset(root, cfg.name), False
    signature = read_signature(cfg)  # the one read of the model, shared by declaration and build
    decl = declaration(cfg, signature)
    decl_sha = declaration_sha256(decl)
    set_dir = _set_dir(root, cfg.name)
    versions = _versions(set_dir)
    if versions:
        current = _read_manifest(set_dir / f"v{versions[-1]}", cfg.name, versions[-1])
        if current.declaration_sha256 == decl_sha:
            return current, False
    samples, labels = build(cfg, signature)
    if not samples:
        raise BenchsetError(f"benchset {cfg.name!r}: source {cfg.source} yielded no samples")
    built = _Built(cfg, decl, decl_sha, samples, labels)
    for _ in range(10):  # another process may take version N first: then try N+1
        version = (versions[-1] if versions else 0) + 1
        try:
            return _write_version(set_dir, built, version, clock()), True
        except FileExistsError:
            versions = _versions(set_dir)
            current = _read_manifest(set_dir / f"v{versions[-1]}", cfg.name, versions[-1])
            if current.declaration_sha256 == decl_sha:
                return current, False
        except OSError as exc:  # a full disk, a read-only volume: nothing half-written is left behind
            raise BenchsetError(
                f"benchset {cfg.name!r}: cannot write v{version} in {set_dir}: {exc.strerror or exc}"
            ) from None
    raise BenchsetError(f"benchset {cfg.name!r}: could not claim a new version in {set_dir}")


@dataclass(frozen=True)
class _Built:
    """What a new version of a set holds, built once: every try at a version number writes the same."""

    cfg: BenchsetConfig
    declaration: dict[str, Any]
    declaration_sha256: str
    samples: list[Sample]
    labels: list[str]


def _write_version(set_dir: Path, built: _Built, version: int, now: datetime) -> Benchset:
    set_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-v{version}-", dir=set_dir))
    try:
        manifest = _manifest(tmp, built, version, now)
        write_manifest(tmp / MANIFEST, manifest)
        fsync_dir(tmp)
        bs = _benchset(manifest, set_dir / f"v{version}")
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


def _manifest(directory: Path, built: _Built, version: int, now: datetime) -> Manifest:
    """Save every tensor of ``built.samples`` into ``directory`` and return the manifest describing them."""
    cfg = built.cfg
    try:
        rows = []
        for index, sample in enumerate(built.samples):
            row = []
            for position, (input_name, raw) in enumerate(sample.items()):
                array = np.asarray(raw)
                file = f"s{index:05d}_{position}.npy"
                sha = save_npy(directory / file, array)
                row.append(
                    TensorEntry(name=input_name, file=file, dtype=array.dtype.name, shape=array.shape, sha256=sha)
                )
            rows.append(row)
        manifest = Manifest(
            format=FORMAT,
            name=cfg.name,
            version=version,
            created_at=now.isoformat(timespec="seconds"),
            source=cfg.source,
            sha256=_set_sha256(rows),
            declaration_sha256=built.declaration_sha256,
            declaration=built.declaration,
            samples=[ManifestSample(label=label, tensors=row) for label, row in zip(built.labels, rows, strict=True)],
        )
    except ValidationError as exc:  # e.g. an npz key longer than a manifest allows
        raise BenchsetError(f"benchset {cfg.name!r} cannot be recorded: {describe_errors(exc)}") from None
    return manifest


def _read_manifest(version_dir: Path, name: str, version: int) -> Benchset:
    return _benchset(read_manifest(version_dir, name, version), version_dir)


def _benchset(manifest: Manifest, directory: Path) -> Benchset:
    """The in-memory view of a validated manifest that lives in ``directory``."""
    return Benchset(
        name=manifest.name,
        version=manifest.version,
        directory=directory,
        sha256=manifest.sha256,
        created_at=manifest.created_at,
        source=manifest.source,
        declaration_sha256=manifest.declaration_sha256,
        samples=tuple(tuple(sample.tensors) for sample in manifest.samples),
        labels=tuple(sample.label for sample in manifest.samples),
    )


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


def replayed(root: Path, default: str, result: CheckResult) -> Benchset | None:
    """The set version a check replayed (``result``), else ``default``'s newest materialized one; None when none."""
    version = result.details.get("benchset_version")
    try:
        return open_benchset(root, result.benchset or default, version if isinstance(version, int) else None)
    except MonitorError:
        return None
