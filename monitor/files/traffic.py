"""Real requests staged for a benchmark set, until a person promotes them into a new version.

Generated inputs miss what real requests hold. Samples of real traffic arrive as Open Inference Protocol
request payloads (``{"inputs": [{"name", "shape", "datatype", "data"}]}``), as KServe's request logger
sends them (CloudEvents over HTTP: binary mode, ``ce-type: org.kubeflow.serving.inference.request`` and the
payload as the body, or structured mode, ``application/cloudevents+json`` with the payload in ``data``), or
as files on disk (``.npz`` or such a JSON payload). Each is validated against the model's signature (as an
import is), stored once by the sha256 of its tensors (a duplicate is counted, not stored again) in the
set's staging area (``<benchsets_dir>/.staged/<name>/``), within caps on samples and bytes. Nothing of it
is a benchmark set until ``promote``: a new, versioned, checksummed version of the set (``import_files``),
after which the staging area is empty.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import BenchsetError
from monitor.files import benchsets
from monitor.files.signature import InputSpec, check_inputs_fit

Sample = dict[str, np.ndarray]
MAX_SAMPLES = 1000  # staged per set, until promoted
MAX_BYTES = 256 * 1024 * 1024
REQUEST_EVENT = "org.kubeflow.serving.inference.request"

# The Open Inference Protocol's datatypes (the one table: serving/wire.py reads it too).
OIP_DATATYPES: Mapping[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}


class StagingFull(BenchsetError):
    """The staging area holds its cap of samples or bytes: promote or clear it first."""


class StagingFailed(BenchsetError):
    """A valid sample could not be written (a full disk, a file-size limit): nothing was staged. Not the
    sender's mistake: exit 3 on the command line, 507 from the API."""

    exit_code = 3


@dataclass(frozen=True)
class Staged:
    digest: str
    duplicate: bool
    count: int  # samples staged now


def parse_request(body: bytes, headers: Mapping[str, str]) -> Sample | None:
    """The sample in an OIP request payload or a KServe request-logger CloudEvent; None for another event."""
    lowered = {k.lower(): v for k, v in headers.items()}
    event_type = lowered.get("ce-type")
    document = _json(body)
    if event_type is None and "specversion" in document and "type" in document:  # structured CloudEvent
        event_type = str(document["type"])
        document = document.get("data") if isinstance(document.get("data"), dict) else _json(_base64(document))
    if event_type is not None and event_type != REQUEST_EVENT:
        return None
    return payload_sample(document)


def payload_sample(document: Any) -> Sample:
    """The tensors of an Open Inference Protocol request payload (JSON data; the binary extension is refused)."""
    inputs = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(inputs, list) or not inputs:
        raise BenchsetError("not an Open Inference Protocol request: no 'inputs' list")
    sample: Sample = {}
    for tensor in inputs:
        if not isinstance(tensor, dict) or not isinstance(tensor.get("name"), str):
            raise BenchsetError("an input without a name")
        name, datatype = tensor["name"], tensor.get("datatype")
        numpy_type = OIP_DATATYPES.get(str(datatype))
        if numpy_type is None:
            raise BenchsetError(
                f"input {name!r}: datatype {datatype!r} cannot be a benchmark sample (numbers and BOOL)"
            )
        if "data" not in tensor:
            raise BenchsetError(f"input {name!r}: no 'data' (the binary tensor extension is not taken here: send JSON)")
        shape = tensor.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise BenchsetError(f"input {name!r}: shape {shape!r} is not a list of sizes")
        try:
            array = np.array(tensor["data"], dtype=numpy_type).reshape(shape)
        except (ValueError, TypeError, OverflowError) as exc:  # OverflowError: 300 as UINT8, 2**70 as INT64
            raise BenchsetError(f"input {name!r}: data does not fill shape {shape} as {datatype}: {exc}") from None
        if name in sample:
            raise BenchsetError(f"input {name!r} is given twice")
        sample[name] = array
    return sample


def file_sample(path: Path) -> Sample:
    """A sample from a file on disk: ``.npz`` (keys are input names) or an OIP request payload (``.json``)."""
    from monitor.files.benchset_sources import read_npz_sample

    if path.suffix == ".npz":
        return read_npz_sample(path)
    from monitor import bounded

    return payload_sample(_json(bounded.read_bytes(path, limit=64 * 1024 * 1024)))


def signature_for(models: Sequence[tuple[str, Path]], name: str) -> list[InputSpec]:
    """The signature samples of set ``name`` must fit: the first model of ``models`` (name, path) that uses it."""
    from monitor.files.signature import model_signature

    if not models:
        raise BenchsetError(f"no model uses benchset {name!r}: no signature to validate samples against")
    return model_signature(models[0][1])


def staging_dir(root: Path, name: str) -> Path:
    return root / ".staged" / name


def staged(root: Path, name: str) -> list[Path]:
    """The staged samples of set ``name``, oldest first."""
    folder = staging_dir(root, name)
    found = []
    for path in folder.glob("*.npz") if folder.is_dir() else ():
        if path.name.startswith("."):  # a sample still being written (or one a full disk cut short)
            continue
        try:
            found.append((path.stat().st_mtime_ns, path.name, path))
        except FileNotFoundError:  # promoted (removed) since it was listed
            continue
    return [path for *_, path in sorted(found)]


def staged_bytes(files: Sequence[Path]) -> int:
    """The bytes of ``files``; one removed meanwhile (a promotion) counts 0."""
    total = 0
    for path in files:
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def stage(root: Path, name: str, sample: Sample, signature: Sequence[InputSpec], *, where: str = "sample") -> Staged:
    """Validate ``sample`` against ``signature`` and store it once; ``StagingFull`` past the caps."""
    check_inputs_fit(sample, signature, where=where)
    digest = digest_of(sample)
    folder = staging_dir(root, name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StagingFailed(f"benchset {name!r}: the staging folder {folder} cannot be made: {exc}") from None
    present = staged(root, name)
    target = folder / f"{digest}.npz"
    if target.exists():
        return Staged(digest, True, len(present))
    buffer = io.BytesIO()
    arrays: dict[str, Any] = dict(sample)
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    if len(present) >= MAX_SAMPLES or staged_bytes(present) + len(data) > MAX_BYTES:
        raise StagingFull(
            f"benchset {name!r}: {len(present)} samples staged, the cap is {MAX_SAMPLES} samples and"
            f" {MAX_BYTES} bytes: promote them (onnxmon benchset promote {name}) first"
        )
    try:
        handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    except OSError as exc:
        raise StagingFailed(f"benchset {name!r}: the sample could not be staged under {folder}: {exc}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except OSError as exc:  # a full disk, a file-size limit: no partial sample is left to be promoted
        Path(tmp).unlink(missing_ok=True)
        raise StagingFailed(f"benchset {name!r}: the sample could not be staged under {folder}: {exc}") from None
    return Staged(digest, False, len(present) + 1)


def promote(root: Path, name: str) -> benchsets.Benchset:
    """The staged samples as a new version of set ``name``; the staging area is emptied after."""
    files = staged(root, name)
    if not files:
        raise BenchsetError(f"benchset {name!r} has no staged samples to promote")
    made = benchsets.import_files(name, files, root, "npz")
    for path in files:
        path.unlink(missing_ok=True)
    return made


def digest_of(sample: Mapping[str, np.ndarray]) -> str:
    """sha256 over each tensor's name, dtype, shape and bytes, in name order: equal samples, equal digests."""
    digest = hashlib.sha256()
    for key in sorted(sample):
        value = np.ascontiguousarray(sample[key])
        digest.update(f"{key}\0{value.dtype.str}\0{value.shape}\0".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _json(body: bytes | str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BenchsetError(f"not JSON: {exc}") from None
    except RecursionError:  # '[[[[...' a few hundred kB deep fits the body limit
        raise BenchsetError("not a payload: JSON nested too deeply") from None


def _base64(document: Mapping[str, Any]) -> bytes:
    import base64
    import binascii

    try:
        return base64.b64decode(str(document.get("data_base64", "")), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BenchsetError(f"CloudEvent data_base64 is not base64: {exc}") from None
