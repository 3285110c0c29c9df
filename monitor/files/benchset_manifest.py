"""The on-disk manifest of one benchmark-set version: its schema, its reader and its writer.

A manifest is untrusted input (anyone who can write the store can edit it), so it is read
in three steps, each refusing with a ``BenchsetError`` that names the file, the field path
(``samples[3].tensors[0].shape[1]``) and what was expected, never another exception:

1. YAML, with anchors and aliases refused (onnxmon never writes them, and a few hundred
   bytes of nested aliases expand to billions of nodes: "billion laughs") and nesting
   bounded (deep nesting would overflow the parser's stack);
2. the pydantic models below, strict (no ``"1"`` for ``1``, no ``true`` for an integer) with
   every list and string bounded, a plain numeric dtype and 64-hex-digit checksums;
3. the cross-checks that need the file's place: the name and version it claims match its
   directory, and every tensor file stays inside that directory.

Unknown keys are ignored, as they always were, so a newer writer may add an optional key
without breaking older readers; an incompatible change bumps ``format``.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from monitor import bounded
from monitor.errors import BenchsetError
from monitor.files.tensors import is_plain_dtype, resolve_inside

MANIFEST = "manifest.yaml"
FORMAT = 1
MAX_SAMPLES = 1_000_000  # generate draws at most 100_000 (+5 edge cases); imports are listed by hand
MAX_TENSORS = 10_000  # inputs of one sample
MAX_TEXT = 4096  # characters in a name, file, label or source
MAX_RANK = 64  # numpy's own limit on dimensions
MAX_DIM = 2**62  # fits int64; the .npy reader checks the data against the file's size
MAX_DEPTH = 64  # YAML nesting; a written manifest nests 7 deep
SHOWN_PROBLEMS = 3
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHOULD = re.compile(r"^(Input|List|String|Tuple|Dictionary|Object) should")


def _sha256(value: str) -> str:
    if not _SHA256.match(value):
        raise ValueError(f"must be 64 lowercase hex digits, got {_short(value)}")
    return value


def _plain_dtype(value: str) -> str:
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError, SyntaxError):  # np.dtype parses strings like "i4, (" with eval-like code
        dtype = None
    if dtype is None or not is_plain_dtype(dtype):
        raise ValueError(f"{_short(value)} is not a plain numeric/bool dtype")
    return dtype.name


def _shape_list(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, tuple):
        return value
    raise ValueError(f"must be a list of non-negative integers, got {type(value).__name__}")


def _timestamp_text(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value  # YAML reads unquoted timestamps


Text = Annotated[str, Field(max_length=MAX_TEXT)]
Sha256 = Annotated[str, AfterValidator(_sha256)]
Dim = Annotated[int, Field(ge=0, le=MAX_DIM)]


class _Strict(BaseModel):
    """Strict types, frozen, unknown keys ignored (see the module docstring)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")


class TensorEntry(_Strict):
    """One tensor of one sample: input name, file relative to the version dir, dtype, shape, sha256."""

    name: Text
    file: Text
    dtype: Annotated[str, Field(max_length=MAX_TEXT), AfterValidator(_plain_dtype)]
    shape: Annotated[tuple[Dim, ...], Field(max_length=MAX_RANK), BeforeValidator(_shape_list)]
    sha256: Sha256


class ManifestSample(_Strict):
    """One sample: its label (``random``, an edge case, the file it came from) and its tensors."""

    label: Text
    tensors: Annotated[list[TensorEntry], Field(max_length=MAX_TENSORS)]


class Manifest(_Strict):
    """A whole ``manifest.yaml``; field order is the order written."""

    format: Annotated[int, Field(ge=FORMAT, le=FORMAT)]
    name: Text
    version: Annotated[int, Field(ge=0)]  # the N of its v<N> directory
    created_at: Annotated[Text, BeforeValidator(_timestamp_text)]
    source: Text
    sha256: Sha256
    declaration_sha256: Sha256
    declaration: dict[str, Any] | None = None  # what determined the content; informative, never read back
    samples: Annotated[list[ManifestSample], Field(max_length=MAX_SAMPLES)]


MAX_MANIFEST_BYTES = 512 << 20  # MAX_SAMPLES entries of a few hundred bytes; a bigger file is not a manifest


def read_manifest(version_dir: Path, name: str, version: int) -> Manifest:
    """The manifest of ``version_dir``, which must say it is ``name`` v``version``; ``BenchsetError`` if not."""
    path = version_dir / MANIFEST
    try:
        text = bounded.read_text(path, limit=MAX_MANIFEST_BYTES)  # a FIFO or /dev/zero here never hangs a check
    except FileNotFoundError:
        raise BenchsetError(f"benchset manifest {path} not found") from None
    except bounded.FileRefused as exc:
        raise BenchsetError(f"benchset manifest {path} cannot be read: {exc.strerror}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchsetError(f"benchset manifest {path} cannot be read: {exc}") from None
    manifest = _validated(text, path)
    if manifest.name != name or manifest.version != version:
        raise BenchsetError(f"{path}: says {manifest.name!r} v{manifest.version}, expected {name!r} v{version}")
    for i, sample in enumerate(manifest.samples):
        for k, entry in enumerate(sample.tensors):
            resolve_inside(version_dir, entry.file, what=f"{path}: samples[{i}].tensors[{k}].file")
    return manifest


def _validated(text: str, path: Path) -> Manifest:
    """The manifest ``text`` (read from ``path``) parsed and validated."""
    raw = _load_yaml(text, path)
    if isinstance(raw, dict) and type(raw.get("format")) is int and raw["format"] != FORMAT:
        raise BenchsetError(f"{path}: format {raw['format']} is not supported (expected {FORMAT})")
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise BenchsetError(f"{path}: {describe_errors(exc)}") from None


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write ``manifest`` as YAML (no anchors or aliases, keys in field order) and fsync it."""
    with open(path, "w", encoding="utf-8") as fp:
        yaml.dump(manifest.model_dump(mode="json"), fp, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
        fp.flush()
        os.fsync(fp.fileno())


# --- YAML -------------------------------------------------------------------------------


# libyaml's parser where the build has it (a manifest of a few dozen samples parses in ~1 ms instead of
# ~15 ms), else PyYAML's own; either way the safe constructor builds the values.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _refuse_anchors_and_depth(text: str) -> None:
    """Refuse anchors, aliases and nesting deeper than ``MAX_DEPTH``, from the parser's events alone.

    Runs before anything is composed, so an amplification manifest fails at its first anchor and a
    deeply nested one never reaches the (recursive) composer.
    """
    depth = 0
    for event in yaml.parse(text, Loader=_SAFE_LOADER):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _refused("YAML anchors and aliases are not allowed in a manifest", event)
        if isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if depth >= MAX_DEPTH:
                raise _refused(f"nesting deeper than {MAX_DEPTH} levels is not allowed in a manifest", event)
            depth += 0 if isinstance(event, yaml.ScalarEvent) else 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _refused(problem: str, event: yaml.Event) -> yaml.MarkedYAMLError:
    """A YAML construct a manifest may not use, located where ``event`` starts."""
    at = event.start_mark  # libyaml's own Mark class, or PyYAML's: the line and column are what is read
    mark = yaml.Mark("manifest", at.index, at.line, at.column, None, 0) if at is not None else None
    return yaml.MarkedYAMLError(problem=problem, problem_mark=mark)


class _Dumper(yaml.SafeDumper):
    """``SafeDumper`` that never writes anchors/aliases, even for an object that appears twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _load_yaml(text: str, path: Path) -> Any:
    """The one YAML document in ``text``; ``BenchsetError`` with line and column if it is not one."""
    try:
        _refuse_anchors_and_depth(text)  # the reader refuses control characters here, before any parsing
        return yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise BenchsetError(f"benchset manifest {path} cannot be read:{where} {problem}") from None
    except (ValueError, OverflowError) as exc:  # a scalar YAML resolves but cannot build: 2020-02-30, 5000 digits
        raise BenchsetError(f"benchset manifest {path} cannot be read: {exc}") from None


# --- error messages ---------------------------------------------------------------------


def describe_errors(exc: ValidationError) -> str:
    """The first few problems, one clause each, and how many more there are."""
    errors = exc.errors(include_url=False)
    shown = "; ".join(_describe(error) for error in errors[:SHOWN_PROBLEMS])
    more = len(errors) - SHOWN_PROBLEMS
    return shown + (f"; and {more} more problem(s)" if more > 0 else "")


def _describe(error: ErrorDetails) -> str:
    """``samples[0].tensors[1].shape[2] must be greater than or equal to 0, got -1`` from a pydantic error."""
    where = _field_path(error["loc"])
    kind, given = error["type"], error.get("input")
    message = _SHOULD.sub("must", error["msg"].removeprefix("Value error, "))
    if kind == "missing":
        return f"{where} is missing"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{where} must be a mapping, got {type(given).__name__}"
    if kind.endswith("_type"):
        return f"{where} {message}, got {type(given).__name__}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{where} {message}, got {_short(given)}"
    return f"{where} {message}"


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "top level"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
