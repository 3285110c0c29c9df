"""Identity of a model file: hashes of the ``.onnx`` and of its external-data files.

A swapped model must never pass silently, so a baseline records the sha256 (and md5,
which many teams already compare) of the model file and of every external-data file it
references. Reading only the protobuf header (``load_external_data=False``) keeps this
cheap for multi-gigabyte models, and a check worker's ``stamped.Digests`` answers what was read
from a file (its digests; for the model file, its header's facts) while its stat stamp has not
moved since.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from monitor.details import ModelDetails
from monitor.errors import ModelError
from monitor.files.stamped import Digests
from monitor.files.tensors import open_regular


@dataclass(frozen=True)
class ModelIdentity:
    """Hashes and headline facts of one model file."""

    path: str
    sha256: str
    md5: str
    size_bytes: int
    external_data: dict[str, str] = field(default_factory=dict)
    opset: int | None = None
    ir_version: int | None = None
    producer: str = ""

    def to_dict(self) -> ModelDetails:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "md5": self.md5,
            "size_bytes": self.size_bytes,
            "external_data": dict(self.external_data),
            "opset": self.opset,
            "ir_version": self.ir_version,
            "producer": self.producer,
        }


def file_digests(path: Path) -> tuple[str, str]:
    """(sha256, md5) of a regular file, read once in 1 MiB blocks (a FIFO is refused, never waited on)."""
    sha, md5 = hashlib.sha256(), hashlib.md5(usedforsecurity=False)
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
            md5.update(block)
    return sha.hexdigest(), md5.hexdigest()


@dataclass(frozen=True)
class _Read:
    """What one read of a model file gives: its digests and the facts of its header."""

    sha256: str
    md5: str
    opset: int | None
    ir_version: int
    producer: str
    locations: tuple[str, ...]  # its external-data files, relative to its directory


def identify(path: Path, digests: Digests | None = None) -> ModelIdentity:
    """Hash ``path`` and its external data; ``ModelError`` if missing or not an ONNX model.

    ``digests`` (a check worker's) answers what was read from a file while its stat stamp is unchanged.
    """
    path = Path(path)
    if not path.exists():
        raise ModelError(f"model file {path} not found")
    digests = Digests() if digests is None else digests  # a table of its own: nothing answered from before
    read = digests.digest(path, _read)
    external: dict[str, str] = {}
    for location in read.locations:
        data_file = (path.parent / location).resolve()
        if not data_file.exists():
            raise ModelError(f"model file {path} references external data {location!r}, which is missing")
        try:
            external[location] = digests.digest(data_file, file_digests)[0]
        except OSError as exc:
            raise ModelError(
                f"external data {location!r} of model {path} cannot be read: {exc.strerror or exc}"
            ) from None
    return ModelIdentity(
        path=str(path),
        sha256=read.sha256,
        md5=read.md5,
        size_bytes=path.stat().st_size,
        external_data=external,
        opset=read.opset,
        ir_version=read.ir_version,
        producer=read.producer,
    )


def _read(path: Path) -> _Read:
    """The digests and header facts of the model file ``path`` (``ModelError`` when it is not one)."""
    try:
        sha256, md5 = file_digests(path)
    except OSError as exc:
        raise ModelError(f"model file {path} cannot be read: {exc.strerror or exc}") from None
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelError(f"model file {path} is not a valid ONNX model: {exc}") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelError(f"model file {path} is not a valid ONNX model: it has no graph")
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    producer = f"{proto.producer_name} {proto.producer_version}".strip()
    return _Read(sha256, md5, opset, proto.ir_version, producer, tuple(sorted(_external_locations(proto))))


def _external_locations(proto: onnx.ModelProto) -> set[str]:
    locations: set[str] = set()
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    locations.add(entry.value)
    return locations
