"""The measured path of ``scripts/drift-study`` and its pure comparison functions.

Two halves, both free of onnxmon code on purpose (the study's ground truth is plain ONNX Runtime
and numpy):

- **The worker** (``python scripts/drift_measure.py worker ...``), run by each release's own
  interpreter: loads one model with plain ``onnxruntime``, runs every saved input sample at each
  graph optimization level, and writes the outputs to one ``.npz`` (keys ``L<level>_S<sample>_O<output>``,
  indices into the JSON report beside it, so output names with ``/`` or non-ASCII characters are
  safe). A ZipMap output (a sequence of maps) becomes two arrays, ``name:keys`` and ``name:values``
  (one row per map); any other non-tensor output is skipped with a note. String tensors become
  fixed-width unicode arrays, so the file loads without pickles.
- **The comparison** (pure numpy, imported by the study and by ``tests/test_drift_study.py``):
  bit-exactness, relative error with a floor, decisions flipped, and the MLPerf TEST01 band.

The rules, written down once:

- *bit-exact*: same dtype, same shape, identical bits; NaN at the same places counts as identical
  whatever its payload.
- *relative error*: ``|a - b| / max(|b|, floor)`` in float64, ``b`` the reference (the older release
  of a pair), ``floor = FLOOR_SCALE * RMS(b)`` over the finite elements of all samples of the output,
  at least ``FLOOR_MIN``. The same non-finite value at the same place is error 0; a non-finite value
  anywhere else is error ``inf``. ``p99`` is the 99th percentile (``higher``: an observed value) over
  all elements of all samples. Beside them, ``rms_rel = ||a - b|| / ||b||`` over the finite elements
  of all samples: one number for the whole output that no near-zero element can inflate.
- *decisions*: a float output of rank >= 2 whose last dim is >= 2 decides by argmax over the last
  axis (one decision per row); integer, bool and string outputs decide by equality (one per element);
  any other output decides nothing (``n/a``).
- *band* (MLPerf TEST01's two tiers): ``exact`` when bit-exact; else, for an output with decisions,
  the flip ratio stands in for the task metric: ``<= 0.1 %`` is the ``99.9 % band``, ``<= 1 %`` the
  ``99 % band``, more is ``outside``; an output without decisions is ``numeric only``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FLOOR_SCALE = 1e-6
FLOOR_MIN = 1e-30
BAND_999, BAND_99 = 0.001, 0.01
EXACT, IN_999, IN_99, OUTSIDE, NUMERIC_ONLY = "exact", "99.9 % band", "99 % band", "outside", "numeric only"
BAND_ORDER = (EXACT, IN_999, IN_99, OUTSIDE)
LEVELS = ("disable", "basic", "extended", "all")


# --- comparison (pure numpy) ----------------------------------------------------------------------


def bit_exact(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bits; NaN at the same places is identical whatever its payload."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return False
    keep = ~nan_a
    width = a.dtype.itemsize if a.dtype.kind == "f" else a.dtype.itemsize // 2
    as_bits = np.dtype(f"u{width}")
    return bool(np.array_equal(a[keep].view(as_bits), b[keep].view(as_bits)))


def relative_floor(reference: Sequence[np.ndarray]) -> float:
    """``FLOOR_SCALE * RMS`` of the reference's finite elements over all samples, at least ``FLOOR_MIN``."""
    values = np.concatenate([np.asarray(r, dtype=np.float64).ravel() for r in reference]) if reference else []
    finite = np.asarray(values)[np.isfinite(values)]
    rms = float(np.sqrt(np.mean(finite * finite))) if finite.size else 0.0
    return max(FLOOR_SCALE * rms, FLOOR_MIN)


def relative_errors(candidate: np.ndarray, reference: np.ndarray, floor: float) -> np.ndarray:
    """Element-wise ``|a-b| / max(|b|, floor)`` in float64; agreeing non-finite values are 0, others inf."""
    a = np.asarray(candidate, dtype=np.float64)
    b = np.asarray(reference, dtype=np.float64)
    finite = np.isfinite(a) & np.isfinite(b)
    with np.errstate(invalid="ignore", over="ignore"):
        errors = np.abs(a - b) / np.maximum(np.abs(b), floor)
    same_nonfinite = ~finite & ((a == b) | (np.isnan(a) & np.isnan(b)))
    return np.where(finite, errors, np.where(same_nonfinite, 0.0, np.inf))


def rms_relative_error(candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """``||a - b|| / ||b||`` over the elements finite in both, all samples together (0/0 is 0)."""
    diff = ref = 0.0
    for c, r in zip(candidate, reference, strict=True):
        a, b = np.asarray(c, dtype=np.float64).ravel(), np.asarray(r, dtype=np.float64).ravel()
        keep = np.isfinite(a) & np.isfinite(b)
        diff += float(np.sum((a[keep] - b[keep]) ** 2))
        ref += float(np.sum(b[keep] ** 2))
    if ref == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return float(np.sqrt(diff / ref))


def decision_kind(example: np.ndarray) -> str:
    """``argmax`` (float, rank >= 2, last dim >= 2), ``equal`` (integer, bool, string) or ``n/a``."""
    if example.dtype.kind == "f":
        return "argmax" if example.ndim >= 2 and example.shape[-1] >= 2 else "n/a"
    return "equal" if example.dtype.kind in "iubUS" else "n/a"


def decisions(value: np.ndarray, kind: str) -> np.ndarray:
    """What ``value`` decides, one entry per row (argmax) or per element (equal)."""
    if kind == "argmax":
        return np.argmax(value, axis=-1).ravel()
    return np.asarray(value).ravel()


def band(exact: bool, flip_ratio: float | None) -> str:
    """MLPerf TEST01's two tiers, with the decision flip ratio standing in for the task metric."""
    if exact:
        return EXACT
    if flip_ratio is None:
        return NUMERIC_ONLY
    if flip_ratio <= BAND_999:
        return IN_999
    return IN_99 if flip_ratio <= BAND_99 else OUTSIDE


@dataclass(frozen=True)
class OutputDrift:
    """How one output of a model moved between two runs, over all samples."""

    output: str
    bit_exact: bool
    max_rel: float | None  # None: no numbers to subtract (strings) or shapes differ
    p99_rel: float | None
    decision: str  # argmax | equal | n/a
    decisions_total: int = 0
    decisions_flipped: int = 0
    note: str = ""
    rms_rel: float | None = None

    @property
    def flip_ratio(self) -> float | None:
        if self.decision == "n/a" or self.decisions_total == 0:
            return None
        return self.decisions_flipped / self.decisions_total

    @property
    def band(self) -> str:
        return band(self.bit_exact, self.flip_ratio)


def compare_output(name: str, candidate: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> OutputDrift:
    """One output over all samples: ``candidate`` (the newer run) against ``reference`` (the older)."""
    kind = decision_kind(reference[0]) if reference else "n/a"
    if len(candidate) != len(reference):
        return OutputDrift(name, False, None, None, kind, note=f"{len(candidate)} samples vs {len(reference)}")
    mismatched = [
        f"sample {i}: {c.dtype}{list(c.shape)} vs {r.dtype}{list(r.shape)}"
        for i, (c, r) in enumerate(zip(candidate, reference, strict=True))
        if c.shape != r.shape or (c.dtype.kind in "US") != (r.dtype.kind in "US")
    ]
    if mismatched:
        return OutputDrift(name, False, None, None, kind, note="shape or dtype differs: " + mismatched[0])
    exact = all(bit_exact(c, r) for c, r in zip(candidate, reference, strict=True))
    dtype_note = (
        "" if candidate[0].dtype == reference[0].dtype else f"dtype {reference[0].dtype} -> {candidate[0].dtype}"
    )
    max_rel = p99_rel = rms_rel = None
    if reference[0].dtype.kind not in "US":
        rms_rel = rms_relative_error(candidate, reference)
        floor = relative_floor(reference)
        errors = np.concatenate(
            [relative_errors(c, r, floor).ravel() for c, r in zip(candidate, reference, strict=True)]
        )
        if errors.size:
            max_rel = float(errors.max())
            p99_rel = float(np.quantile(errors, 0.99, method="higher"))
    total = flipped = 0
    if kind != "n/a":
        for c, r in zip(candidate, reference, strict=True):
            now, then = decisions(c, kind), decisions(r, kind)
            total += then.size
            flipped += int(np.count_nonzero(now != then))
    return OutputDrift(name, exact, max_rel, p99_rel, kind, total, flipped, dtype_note, rms_rel)


@dataclass(frozen=True)
class ModelDrift:
    """One model between two runs: every output, or why it could not be compared."""

    model: str
    outputs: tuple[OutputDrift, ...] = ()
    error: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def measured(self) -> bool:
        return not self.error and bool(self.outputs)

    @property
    def bit_exact(self) -> bool:
        return self.measured and all(o.bit_exact for o in self.outputs)

    @property
    def max_rel(self) -> float | None:
        values = [o.max_rel for o in self.outputs if o.max_rel is not None]
        return max(values) if values else None

    @property
    def p99_rel(self) -> float | None:
        values = [o.p99_rel for o in self.outputs if o.p99_rel is not None]
        return max(values) if values else None

    @property
    def rms_rel(self) -> float | None:
        values = [o.rms_rel for o in self.outputs if o.rms_rel is not None]
        return max(values) if values else None

    @property
    def worst_decision(self) -> OutputDrift | None:
        """The output with decisions whose flip ratio is highest (the first such output on a tie)."""
        deciding = [o for o in self.outputs if o.flip_ratio is not None]
        return max(deciding, key=lambda o: o.flip_ratio or 0.0) if deciding else None

    @property
    def flipped_any(self) -> bool:
        return any(o.decisions_flipped for o in self.outputs)

    @property
    def band(self) -> str:
        """``exact`` when every output is; else the worst band of the outputs with decisions, else numeric only."""
        if not self.measured:
            return "error"
        if self.bit_exact:
            return EXACT
        worst = self.worst_decision
        return band(False, worst.flip_ratio) if worst is not None else NUMERIC_ONLY


def compare_runs(
    model: str, candidate: dict[str, list[np.ndarray]], reference: dict[str, list[np.ndarray]]
) -> ModelDrift:
    """Every output both runs produced; an output only one of them has is a note."""
    notes = [f"output {name!r} only in the reference run" for name in reference if name not in candidate]
    notes += [f"output {name!r} only in the candidate run" for name in candidate if name not in reference]
    outputs = tuple(compare_output(name, candidate[name], reference[name]) for name in reference if name in candidate)
    if not outputs:
        return ModelDrift(model, error="no output in common", notes=tuple(notes))
    return ModelDrift(model, outputs, notes=tuple(notes))


# --- non-tensor outputs ---------------------------------------------------------------------------


def flatten_output(name: str, value: Any) -> tuple[dict[str, np.ndarray], str]:
    """An ORT output as plain arrays: a tensor as it is (strings fixed-width), a ZipMap as keys and values.

    Returns the arrays by name and a note (empty unless something was skipped).
    """
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {name: np.asarray([str(v) for v in value.ravel()], dtype=np.str_).reshape(value.shape)}, ""
        return {name: value}, ""
    if isinstance(value, list) and all(isinstance(row, dict) for row in value):
        keys = [list(row.keys()) for row in value]
        if keys and any(k != keys[0] for k in keys):
            return {}, f"{name}: maps with different keys, skipped"
        key_array = np.asarray(keys if keys else [[]])
        if key_array.dtype == object or key_array.dtype.kind in "US":
            key_array = np.asarray([[str(k) for k in row] for row in keys], dtype=np.str_)
        values = np.asarray([[row[k] for k in row] for row in value], dtype=np.float32)
        return {f"{name}:keys": key_array, f"{name}:values": values}, ""
    return {}, f"{name}: a {type(value).__name__} output (not a tensor or a sequence of maps), skipped"


# --- the worker: plain onnxruntime + numpy --------------------------------------------------------


def worker(model: Path, inputs: Path, out: Path, levels: Sequence[str], threads: int) -> int:
    """Run every sample of ``inputs`` through ``model`` at each level; write ``out`` (.npz) and its .json."""
    import onnxruntime as ort  # the release under test: imported only here

    names = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    samples = []
    for path in sorted(inputs.glob("sample-*.npz")):
        with np.load(path, allow_pickle=False) as data:
            samples.append({key: data[key] for key in data.files})
    report: dict[str, Any] = {"onnxruntime": ort.__version__, "numpy": np.__version__, "levels": {}}
    arrays: dict[str, np.ndarray] = {}
    output_names: list[str] = []
    for level in levels:
        started = time.monotonic()
        entry: dict[str, Any] = {"notes": []}
        try:
            options = ort.SessionOptions()
            options.graph_optimization_level = names[level]
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
            wanted = [o.name for o in session.get_outputs()]
            for index, sample in enumerate(samples):
                for name, value in zip(wanted, session.run(wanted, sample), strict=True):
                    flat, note = flatten_output(name, value)
                    if note and note not in entry["notes"]:
                        entry["notes"].append(note)
                    for flat_name, array in flat.items():
                        if flat_name not in output_names:
                            output_names.append(flat_name)
                        arrays[f"L{level}_S{index}_O{output_names.index(flat_name)}"] = array
        except Exception as error:  # a release that cannot load or run the model is a finding, not a crash
            entry["error"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300] if str(error) else ''}"
        entry["seconds"] = round(time.monotonic() - started, 3)
        report["levels"][level] = entry
    report["samples"], report["outputs"] = len(samples), output_names
    np.savez(out, **arrays)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


def load_run(out: Path) -> tuple[dict[str, Any], dict[str, dict[str, list[np.ndarray]]]]:
    """A worker's report and its outputs as ``{level: {output: [array per sample]}}`` (levels that ran)."""
    report = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))
    runs: dict[str, dict[str, list[np.ndarray]]] = {}
    with np.load(out, allow_pickle=False) as data:
        for level, entry in report["levels"].items():
            if entry.get("error"):
                continue
            per_output: dict[str, list[np.ndarray]] = {}
            for index, name in enumerate(report["outputs"]):
                keys = [f"L{level}_S{s}_O{index}" for s in range(report["samples"])]
                if all(key in data.files for key in keys):
                    per_output[name] = [data[key] for key in keys]
            runs[level] = per_output
    return report, runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("worker", help="run one model under this interpreter's onnxruntime")
    run.add_argument("--model", type=Path, required=True)
    run.add_argument("--inputs", type=Path, required=True, help="folder of sample-NNN.npz")
    run.add_argument("--out", type=Path, required=True, help="outputs .npz (a .json report is written beside)")
    run.add_argument("--levels", default="disable,all")
    run.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    levels = [level for level in args.levels.split(",") if level]
    unknown = [level for level in levels if level not in LEVELS]
    if unknown:
        parser.error(f"unknown level(s) {unknown}; levels are {list(LEVELS)}")
    return worker(args.model, args.inputs, args.out, levels, args.threads)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
