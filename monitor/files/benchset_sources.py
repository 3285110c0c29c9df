"""Where benchmark-set samples come from, and whether they fit a model.

Each source turns a declaration into a list of samples (``{input name: array}``) and a
*declaration* mapping whose hash decides whether a set must be re-materialized:

- ``generate``: seeded draws from the model's input signature (``benchset_generate``). The
  declaration holds the spec and the model's *input signature*, not its weights: retraining a
  model does not fork its set.
- ``npz``: one ``.npz`` file per sample, keys are input names, read without pickles.
- ``onnx_test_data``: ONNX backend test data, ``test_data_set_N/input_K.pb`` TensorProtos;
  an unnamed tensor takes the name of the K-th input of the ``.onnx`` model beside the sets.
- ``polygraphy_json``: the file ``polygraphy run --save-inputs`` writes: a JSON list of
  ``{input name: array}`` where an array is ``{"array": base64(np.save bytes),
  "polygraphy_class": "ndarray"}`` (older files: the ``__polygraphy_encoded_ndarray`` key,
  latin-1 text instead of base64, or a one-array npz inside).

For file sources the declaration holds the sha256 of every file read, in order.

The model a set depends on (``generate``'s, or the one beside ONNX test data) is read once,
by ``read_signature``; ``declaration`` and ``build`` take that signature instead of reading
the model again, so materializing a set parses a large model once, not twice.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from monitor import bounded
from monitor.config.settings import BenchsetConfig
from monitor.errors import BenchsetError
from monitor.files.benchset_generate import MAX_TENSOR_BYTES, Sample, generate
from monitor.files.polygraphy import read_polygraphy_json
from monitor.files.signature import InputSpec, model_signature
from monitor.files.tensors import is_plain_dtype, load_npz, sha256_bytes, sha256_file

GENERATOR_VERSION = 1  # bump when the drawing algorithm changes, so declared sets fork


def read_signature(cfg: BenchsetConfig) -> list[InputSpec] | None:
    """The input signature of the model the set depends on, read once; None when there is none."""
    if cfg.generate is not None:
        return model_signature(cfg.generate.model)
    if cfg.onnx_test_data is not None:
        model = _test_data_model(cfg.onnx_test_data)
        return model_signature(model) if model else None
    return None


def declaration(cfg: BenchsetConfig, signature: Sequence[InputSpec] | None) -> dict[str, Any]:
    """What determines the set's content; its hash decides whether a new version is needed.

    ``signature`` is ``read_signature(cfg)``.
    """
    if cfg.generate is not None:
        spec = cfg.generate
        return {
            "source": "generate",
            "generator_version": GENERATOR_VERSION,
            "signature": [
                [s.name, s.dtype.name if s.dtype is not None else None, list(s.shape)]
                for s in _required(signature, cfg)
            ],
            **spec.model_dump(mode="json", exclude={"model"}),
        }
    if cfg.npz is not None:
        return {"source": "npz", "files": [_file_hash(path, "npz") for path in npz_files(cfg)]}
    if cfg.onnx_test_data is not None:
        sets = _test_data_sets(cfg.onnx_test_data)
        files = [_file_hash(pb, "onnx_test_data") for d in sets for pb in _numbered(d, "input")]
        names = _names(signature) if signature is not None else None
        return {"source": "onnx_test_data", "files": files, "model_inputs": names}
    if cfg.polygraphy_json is not None:
        return {"source": "polygraphy_json", "files": [_file_hash(cfg.polygraphy_json, "polygraphy_json")]}
    raise AssertionError("BenchsetConfig is validated to have one source")


def build(cfg: BenchsetConfig, signature: Sequence[InputSpec] | None) -> tuple[list[Sample], list[str]]:
    """The samples of a declared set and a label for each (``random``/an edge case/the file).

    ``signature`` is ``read_signature(cfg)``: the model is not read again.
    """
    if cfg.generate is not None:
        return generate(cfg.generate, _required(signature, cfg), where=f"benchset {cfg.name!r}")
    if cfg.npz is not None:
        paths = npz_files(cfg)
        samples = [read_npz_sample(path) for path in paths]
        first = set(samples[0]) if samples else set()
        for path, sample in zip(paths, samples, strict=True):
            if set(sample) != first:
                raise BenchsetError(f"npz file {path} has keys {sorted(sample)}, the first file has {sorted(first)}")
        return samples, [path.name for path in paths]
    if cfg.onnx_test_data is not None:
        sets = _test_data_sets(cfg.onnx_test_data)
        names = _names(signature) if signature is not None else ()
        return read_onnx_test_inputs(cfg.onnx_test_data, input_names=names), [d.name for d in sets]
    if cfg.polygraphy_json is not None:
        samples = read_polygraphy_json(cfg.polygraphy_json)
        return samples, [f"iteration {i}" for i in range(len(samples))]
    raise AssertionError("BenchsetConfig is validated to have one source")


def npz_files(cfg: BenchsetConfig) -> list[Path]:
    """``cfg.npz`` with each glob (``data/*.npz``) expanded, sorted by name; an empty match is an error.

    Entries keep their order; within one pattern, files are sorted so the set's order (and hash)
    does not depend on the directory listing. A file matched twice is a sample once.
    """
    found: list[Path] = []
    for entry in cfg.npz or []:
        text = str(entry)
        if not any(c in text for c in "*?["):
            found.append(entry)
            continue
        matches = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
        if not matches:
            raise BenchsetError(f"benchset {cfg.name!r}: npz pattern {text} matches no file")
        found.extend(m for m in matches if m not in found)
    return found


def _required(signature: Sequence[InputSpec] | None, cfg: BenchsetConfig) -> Sequence[InputSpec]:
    """``generate``'s signature, which ``read_signature`` always gives: None here is a caller's bug."""
    if signature is None:
        raise AssertionError(f"benchset {cfg.name!r}: generate needs read_signature(cfg), got None")
    return signature


# --- file sources -----------------------------------------------------------------------


def read_npz_sample(path: Path) -> Sample:
    """One sample from an ``.npz`` file (keys = input names); no pickles."""
    if problem := bounded.not_regular(path):
        raise BenchsetError(f"npz file {path} {problem}")
    sample = load_npz(path)
    if not sample:
        raise BenchsetError(f"npz file {path} holds no arrays")
    return sample


def read_onnx_test_inputs(directory: Path, *, input_names: Sequence[str] | None = None) -> list[Sample]:
    """``input_K.pb`` of every ``test_data_set_N`` under ``directory``, in N order.

    An unnamed tensor K takes ``input_names[K]``, else the K-th input of the model beside the data.
    """
    return _read_test_data(directory, "input", input_names)


def read_onnx_test_outputs(directory: Path, *, output_names: Sequence[str] | None = None) -> list[Sample]:
    """``output_K.pb`` of every ``test_data_set_N`` under ``directory`` (for importing baselines).

    An unnamed tensor K takes ``output_names[K]``, else the K-th output of the model beside the data.
    """
    return _read_test_data(directory, "output", output_names)


def _read_test_data(directory: Path, prefix: str, given: Sequence[str] | None) -> list[Sample]:
    model = _test_data_model(directory) if given is None else None
    names = list(given) if given is not None else None
    if model is not None:
        names = [s.name for s in model_signature(model, outputs=prefix == "output")]
    samples = []
    for set_dir in _test_data_sets(directory):
        sample: Sample = {}
        for index, pb in enumerate(_numbered(set_dir, prefix)):
            name, array = _read_tensor_proto(pb)
            if not name:
                if names is None or index >= len(names):
                    raise BenchsetError(
                        f"tensor file {pb} has no name and there is no model beside the test data to name it"
                    )
                name = names[index]
            if name in sample:
                raise BenchsetError(f"tensor file {pb}: name {name!r} appears twice in {set_dir}")
            sample[name] = array
        samples.append(sample)
    return samples


def _read_tensor_proto(path: Path) -> tuple[str, np.ndarray[Any, Any]]:
    tensor = onnx.TensorProto()
    try:
        raw = bounded.read_bytes(path, limit=MAX_TENSOR_BYTES)  # a FIFO or a device here never hangs an import
    except OSError as exc:
        raise BenchsetError(f"tensor file {path} cannot be read: {exc.strerror or exc}") from None
    try:
        tensor.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError and friends
        raise BenchsetError(f"tensor file {path} is not a TensorProto: {exc}") from None
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise BenchsetError(f"tensor file {path} keeps its data externally; only inline tensors are read")
    try:
        array = np.array(numpy_helper.to_array(tensor))
    except Exception as exc:  # a dims/data mismatch, an unknown type
        raise BenchsetError(f"tensor file {path} cannot be decoded: {exc}") from None
    if not is_plain_dtype(array.dtype):
        raise BenchsetError(f"tensor file {path} holds dtype {array.dtype}; only plain numeric/bool tensors")
    return tensor.name, array


def _test_data_sets(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise BenchsetError(f"onnx test data directory {directory} not found")
    if _numbered(directory, "input") or _numbered(directory, "output"):
        return [directory]
    sets = [d for d in directory.iterdir() if d.is_dir() and re.fullmatch(r"test_data_set_\d+", d.name)]
    if not sets:
        raise BenchsetError(f"onnx test data directory {directory} has no test_data_set_N directories")
    return sorted(sets, key=lambda d: int(d.name.rsplit("_", 1)[1]))


def _numbered(directory: Path, prefix: str) -> list[Path]:
    files = [p for p in directory.iterdir() if re.fullmatch(rf"{prefix}_\d+\.pb", p.name)]
    return sorted(files, key=lambda p: int(p.stem.rsplit("_", 1)[1]))


def _test_data_model(directory: Path) -> Path | None:
    for place in (directory, directory.parent):
        models = sorted(place.glob("*.onnx"))
        if len(models) == 1:
            return models[0]
        if (place / "model.onnx").is_file():
            return place / "model.onnx"
    return None


def _file_hash(path: Path, source: str) -> str:
    if problem := bounded.not_regular(path):
        raise BenchsetError(f"{source} file {path} {problem}")
    return sha256_file(path)


def _names(signature: Sequence[InputSpec]) -> list[str]:
    return [s.name for s in signature]


def declaration_sha256(decl: Mapping[str, Any]) -> str:
    """Hash of the canonical JSON of a declaration."""
    return sha256_bytes(json.dumps(decl, sort_keys=True, separators=(",", ":")).encode())
