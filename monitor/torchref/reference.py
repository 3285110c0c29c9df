"""``reference torch``: the PyTorch model's outputs (and layers) over the benchmark set, as a baseline.

The factory's module (``factory.py``) runs every sample of the model's benchmark set; its outputs,
in the ONNX model's output order, become a baseline of source ``reference``, so ``onnxmon check``
then compares ONNX Runtime with PyTorch. With ``intermediates`` the outputs of the modules that
have an ONNX counterpart (``naming.py``) are stored too, under their ONNX tensor names, for the
first ``samples`` samples: ``onnxmon localize`` then names the first ONNX node departing from
PyTorch. Float values are stored in the dtype the ONNX tensor has (an fp16 build is compared with
PyTorch's values rounded to fp16, not failed for its dtype).

Beside the outputs the baseline keeps ``reference.json`` (``baselines.REFERENCE_DOC``): the torch
version, the factory, the exporter the scopes came from, the module -> tensor map, the coverage
("13 of 18 ONNX tensors have a PyTorch counterpart") and the input check (``inputs.py``): where
PyTorch consumed something other than the benchmark set, each such input described. A check
against this baseline then reports ``input_mismatch`` with that description.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from monitor import capture
from monitor.config.plan import CheckPlan
from monitor.errors import MonitorError
from monitor.files import baseline_meta, baseline_writer, baselines, benchsets, signature
from monitor.localize.engine import FOREIGN_KEY
from monitor.localize.graph import load_model, value_types
from monitor.runtime import envsnap
from monitor.torchref import deadline, factory, hooks, inputs, naming

# plan -> the environment a check of it records, and how it was taken
StackEnvironment = Callable[[CheckPlan], tuple[envsnap.EnvSnapshot, str]]


@dataclass(frozen=True)
class TorchReference:
    """The stored reference and what was learnt making it; ``bool()`` is "PyTorch consumed the benchmark set"."""

    baseline: baselines.Baseline
    active: bool
    facts: Mapping[str, Any]  # the reference.json document

    def __bool__(self) -> bool:
        return not self.facts["input_check"]["mismatches"]

    @property
    def coverage(self) -> str:
        cov = self.facts["coverage"]
        return f"{cov['mapped']} of {cov['tensors']} ONNX tensors have a PyTorch counterpart"

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_id": self.baseline.id,
            "model": self.baseline.meta.model,
            "active": self.active,
            "sample_count": self.baseline.meta.sample_count,
            "directory": str(self.baseline.directory),
            "verdict": "pass" if self else "fail",
            "reasons": [
                {"code": "input_mismatch", "detail": m["description"]} for m in self.facts["input_check"]["mismatches"]
            ],
            "coverage_text": self.coverage if self.facts["coverage"]["stored"] else "",
            **dict(self.facts),
        }


def reference_torch(
    plan: CheckPlan,
    factory_spec: str,
    *,
    intermediates: bool = False,
    samples: int = 1,
    promote: bool = False,
    note: str = "",
    timeout: float = 0.0,
    environment: StackEnvironment,
) -> TorchReference:
    """Run the factory's module over ``plan``'s benchmark set and store a ``reference`` baseline.

    ``environment(plan)`` snapshots the ONNX Runtime stack the check will run, with how it was taken
    (the CLI injects a fresh isolated child: this process has torch, and a CUDA torch's libraries,
    mapped, which no check of the ONNX model uses). It runs before torch touches the benchmark set.

    ``timeout`` (seconds, 0 for none) bounds the user's code: loading the factory and the passes over
    the benchmark set; past it, ``FactoryTimeout`` (exit 3) and nothing is stored.
    """
    if samples < 1:
        raise MonitorError(f"--samples must be >= 1, got {samples}")
    torch = factory.import_torch()
    model = plan.model
    snapshot, snapshot_source = environment(plan)
    ends = time.monotonic() + timeout
    with deadline.within(timeout, factory_spec):
        user_factory = factory.load(factory_spec)
    bench = benchsets.ensure(plan.benchset, plan.benchsets_dir)
    in_specs = signature.model_signature(model.path)
    out_specs = signature.model_signature(model.path, outputs=True)
    input_names = [s.name for s in in_specs]
    graph = load_model(model.path)
    types = value_types(graph)
    float_tensors = frozenset(name for name, vi in types.items() if vi.type.tensor_type.elem_type in naming.FLOAT_TYPES)
    tensor_map: naming.TensorMap | None = None
    dropped: dict[str, str] = {}
    mismatches: list[inputs.InputDifference] = []
    differing: dict[str, int] = {}
    with baseline_writer.BaselineWriter(plan.baselines_dir, model.name) as writer:
        for index in range(len(bench)):
            feeds = bench.load_sample(index)
            layers = intermediates and index < samples
            with deadline.within(
                max(ends - time.monotonic(), 1e-3) if timeout > 0 else 0.0, factory_spec, limit=timeout
            ):
                run = hooks.forward(user_factory, feeds, input_names, layers=layers)
            writer.add_sample(_outputs(run.outputs, out_specs, factory_spec, index))
            for name in input_names:
                difference = _input_difference(name, index, feeds[name], run.consumed)
                if difference is not None:
                    differing[name] = differing.get(name, 0) + 1
                    if not any(m.name == name for m in mismatches):
                        mismatches.append(difference)
            if layers:
                if tensor_map is None:
                    tensor_map = naming.map_modules(graph, run.calls, float_tensors)
                layer_tensors = _layer_tensors(run.activations, tensor_map, types, dropped)
                writer.add_intermediates(index, {**layer_tensors, FOREIGN_KEY: np.array("torch")})
        counted = naming.counted_tensors(graph)
        mapped = set(tensor_map.tensors.values()) - set(dropped) if tensor_map else set()
        facts: dict[str, Any] = {
            "kind": "torch",
            "torch_version": str(torch.__version__),
            "environment_source": snapshot_source,
            "factory": factory_spec,
            "make_inputs": user_factory.make_inputs is not None,
            "exporter": naming.node_scopes(graph)[1],
            "coverage": {
                "mapped": sum(1 for t in counted if t in mapped),
                "tensors": len(counted),
                "stored": tensor_map is not None,
                "samples": min(samples, len(bench)) if intermediates else 0,
                "hint": tensor_map.hint() if tensor_map else "",
            },
            "tensor_map": {m: t for m, t in tensor_map.tensors.items() if t not in dropped} if tensor_map else {},
            "folded_batchnorm": dict(tensor_map.folded) if tensor_map else {},
            "dropped": dropped,
            "input_check": {
                "mismatches": [m.to_dict() | {"samples_differing": differing[m.name]} for m in mismatches],
                "samples": len(bench),
            },
        }
        writer.add_document(baselines.REFERENCE_DOC, facts)
        meta = _meta(plan, bench, facts, note, snapshot)
        first = baselines.active_id(plan.baselines_dir, model.name) is None
        described = capture.model_manifest(model.path)
        if described is not None:
            writer.add_document(baselines.MODEL_MANIFEST, described)
        stored = writer.commit(meta)
    if promote or first:
        baselines.promote(
            plan.baselines_dir, stored.id, by="reference torch --promote" if promote else "first baseline"
        )
    return TorchReference(baseline=stored, active=promote or first, facts=facts)


def _outputs(
    produced: list[np.ndarray], specs: list[signature.InputSpec], factory_spec: str, index: int
) -> dict[str, np.ndarray]:
    """PyTorch's outputs under the ONNX output names, in the ONNX model's dtype where both are float."""
    if len(produced) != len(specs):
        raise MonitorError(
            f"--factory {factory_spec!r}: sample {index}: the module returned {len(produced)} tensor(s), the ONNX"
            f" model has {len(specs)} output(s) {[s.name for s in specs]}"
        )
    return {spec.name: _as_onnx_dtype(value, spec.dtype) for spec, value in zip(specs, produced, strict=True)}


def _input_difference(
    name: str, index: int, fed: np.ndarray, consumed: Mapping[str, np.ndarray]
) -> inputs.InputDifference | None:
    if name not in consumed:
        return inputs.InputDifference(
            name,
            index,
            ("missing",),
            f"input {name!r} (sample {index}): PyTorch's forward did not receive it as a tensor",
        )
    return inputs.describe(name, index, fed, consumed[name])


def _layer_tensors(
    activations: Mapping[str, np.ndarray],
    tensor_map: naming.TensorMap,
    types: Mapping[str, onnx.ValueInfoProto],
    dropped: dict[str, str],
) -> dict[str, np.ndarray]:
    """Each mapped module's output under its ONNX tensor name; a shape the ONNX tensor cannot have is dropped."""
    stored: dict[str, np.ndarray] = {}
    for qualified, tensor in tensor_map.tensors.items():
        value = activations.get(qualified)
        if value is None or tensor in stored or tensor in dropped:
            continue
        info = types.get(tensor)
        expected = _static_shape(info)
        if expected is not None and not _fits(value.shape, expected):
            dropped[tensor] = f"module {qualified!r} made shape {list(value.shape)}, the ONNX tensor has {expected}"
            continue
        dtype = _np_dtype(info)
        stored[tensor] = _as_onnx_dtype(value, dtype)
    return stored


def _as_onnx_dtype(value: np.ndarray, dtype: np.dtype[Any] | None) -> np.ndarray:
    if dtype is not None and dtype.kind == "f" and value.dtype.kind == "f" and value.dtype != dtype:
        return value.astype(dtype)
    return value


def _np_dtype(info: onnx.ValueInfoProto | None) -> np.dtype[Any] | None:
    if info is None or not info.type.tensor_type.elem_type:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def _static_shape(info: onnx.ValueInfoProto | None) -> list[int | str] | None:
    if info is None or not info.type.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in info.type.tensor_type.shape.dim]


def _fits(shape: tuple[int, ...], expected: list[int | str]) -> bool:
    return len(shape) == len(expected) and all(
        not isinstance(e, int) or e == s for s, e in zip(shape, expected, strict=True)
    )


def _meta(
    plan: CheckPlan, bench: benchsets.Benchset, facts: Mapping[str, Any], note: str, snapshot: envsnap.EnvSnapshot
) -> baseline_meta.BaselineMeta:
    session = {"reference": "torch", "torch": {k: facts[k] for k in ("torch_version", "factory", "exporter")}}
    return baseline_meta.new_meta(
        plan.model.name,
        plan.model.path,
        bench,
        source="reference",
        session=session,
        environment=snapshot.to_dict(),
        note=note,
    )
