"""The graph side of localization: node lists, exposing intermediate tensors, the optimized graph.

Intermediate tensors are read by making them graph outputs. ``ExposingRunner`` keeps one
working copy of a model whose initializers live once in an external-data file in a
scratch directory, so exposing another chunk of tensors writes only a small ``.onnx``
(no copy of the weights per run). Every run goes through ``runner.Session``, so the
providers and session options are exactly the production ones.

Types: an exposed output gets the type that ``onnx.shape_inference`` found for it. Where
inference knows nothing (contrib ops in ORT's optimized graph, whose saved form carries no
``value_info``), the output is added with a name only; ONNX Runtime infers the type itself.
If ORT still refuses such a model, the untyped tensors are dropped and listed in
``skipped`` with the reason.

Observer effect: when ``production`` outputs are given, every run's final outputs must
equal them bitwise; the first difference is recorded in ``observer_mismatch`` (exposing a
tensor can stop a fusion and change the numbers).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
import onnx

from monitor import bounded
from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.errors import ModelError
from monitor.files import tensor_storage
from monitor.runtime.session import Session

_OPTIMIZED_CONFIG = {
    # Keep big weights out of the saved optimized .onnx (a protobuf cannot exceed 2 GiB).
    "session.optimized_model_external_initializers_file_name": "optimized.onnx.data",
    "session.optimized_model_external_initializers_min_size_in_bytes": "1024",
}


@dataclass(frozen=True)
class GraphNode:
    """One top-level node, at its position in ``graph.node`` (ONNX requires topological order)."""

    index: int
    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def load_model(path: Path) -> onnx.ModelProto:
    """The model with its external data loaded; ``ModelError`` naming the file if it cannot be read."""
    return load_model_and_data_files(path)[0]


def load_model_and_data_files(path: Path) -> tuple[onnx.ModelProto, tuple[Path, ...]]:
    """``load_model``, and the external data files it read (a loaded model no longer names them).

    What is kept of a model (``noisefloor.py``) depends on those files as much as on the model file.
    """
    if problem := bounded.not_regular(path):
        raise ModelError(f"model file {path} {problem}")
    try:
        model = onnx.load(str(path), load_external_data=False)
        locations = {
            entry.value: None
            for tensor in _tensors(model.graph)
            if tensor.data_location == onnx.TensorProto.EXTERNAL
            for entry in tensor.external_data
            if entry.key == "location"
        }
        onnx.external_data_helper.load_external_data_for_model(model, str(Path(path).parent))
    except Exception as exc:  # protobuf decode errors have several types
        raise ModelError(f"model file {path} is not a readable ONNX model: {exc}") from None
    if not model.graph.node and not model.graph.output:  # an empty file parses as an empty model
        raise ModelError(f"model file {path} is not a valid ONNX model: it has no graph (empty, or not ONNX)")
    short = tensor_storage.problems(model, most=1)
    if short:
        raise ModelError(f"model file {path} is not a valid ONNX model: {short[0]}")
    return model, tuple(Path(path).parent / location for location in locations)


def _tensors(graph: onnx.GraphProto) -> Iterable[onnx.TensorProto]:
    """Every tensor of ``graph`` and of its subgraphs (an ``If`` branch keeps its own initializers)."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)


def shared_tensors(model: onnx.ModelProto, producible: frozenset[str], suffix: str = "") -> list[str]:
    """The model's node outputs that another side produces too (or as ``name + suffix``): what can be compared."""
    return [n for n in node_outputs(model) if n in producible or (suffix and n + suffix in producible)]


def refuse_disjoint(model: onnx.ModelProto, name: str, other: str, producible: frozenset[str], suffix: str) -> None:
    """``ModelError`` (exit 2) when ``other`` shares no tensor name with ``model``: no comparison, no all-clear."""
    if shared_tensors(model, producible, suffix):
        return
    ours = node_outputs(model)
    raise ModelError(
        f"{other} shares no tensor with {name}: none of {name}'s {len(ours)} node outputs"
        f" ({', '.join(ours[:3])}{', …' if len(ours) > 3 else ''}) is produced by {other};"
        " tensors are compared by name, so one is not the other's reference"
    )


def graph_nodes(model: onnx.ModelProto) -> list[GraphNode]:
    """Top-level nodes in graph order; unnamed nodes are called ``<op_type>_<index>``."""
    return [
        GraphNode(
            index=i,
            name=node.name or f"{node.op_type}_{i}",
            op_type=node.op_type,
            inputs=tuple(name for name in node.input if name),
            outputs=tuple(name for name in node.output if name),
        )
        for i, node in enumerate(model.graph.node)
    ]


def node_outputs(model: onnx.ModelProto) -> list[str]:
    """Every tensor produced by a top-level node, in production order (``Constant`` nodes excluded)."""
    return [out for node in graph_nodes(model) if node.op_type != "Constant" for out in node.outputs]


def value_types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Inferred ``ValueInfoProto`` by tensor name; whatever is already in the model if inference fails."""
    known = {vi.name: vi for vi in [*model.graph.value_info, *model.graph.output]}
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    # Inference needs no weight values (small ones may be shapes, kept); dropping big ones keeps it
    # fast and under the 2 GiB protobuf limit.
    for init in stripped.graph.initializer:
        if len(init.raw_data) <= 4096 and not init.external_data:
            continue
        init.ClearField("raw_data")
        init.ClearField("data_location")
        del init.external_data[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(stripped)
    except Exception:  # unknown ops or inconsistent shapes: keep what the model declares
        return known
    for vi in inferred.graph.value_info:
        if vi.type.tensor_type.elem_type:
            known.setdefault(vi.name, vi)
    return known


class ExposingRunner:
    """Runs one model with chosen intermediate tensors exposed; bookkeeping of runs and skips."""

    def __init__(
        self,
        model: onnx.ModelProto,
        feeds: Mapping[str, np.ndarray],
        *,
        providers: Sequence[ProviderSpec],
        session: SessionConfig,
        production: Mapping[str, np.ndarray] | None = None,
        label: str = "subject",
    ) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=f"onnxmon-localize-{label}-"))
        self._feeds = dict(feeds)
        self._providers = list(providers)
        self._session = session
        self._production = dict(production) if production is not None else None
        self._label = label
        self._types = value_types(model)
        self.nodes = graph_nodes(model)
        self.final_outputs = tuple(o.name for o in model.graph.output)
        self.producible = frozenset(node_outputs(model)) | frozenset(self.final_outputs)
        working = onnx.ModelProto()
        working.CopyFrom(model)
        # Writing the weights once as external data mutates ``working`` into a small proto that
        # references them, so each exposure below serializes only the graph.
        onnx.save(
            working,
            str(self._dir / "base.onnx"),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="weights.bin",
            size_threshold=1024,
        )
        self._working = working
        self._last: tuple[tuple[str, ...], Session] | None = None  # a side run twice reuses its session
        self.runs = 0
        self.skipped: dict[str, str] = {}
        self.observer_mismatch: str | None = None

    def __enter__(self) -> ExposingRunner:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Values of ``names`` (those this model produces) from one run; also checks the observer effect."""
        wanted = [n for n in dict.fromkeys(names) if n in self.producible and n not in self.skipped]
        if not wanted:
            return {}
        extra = [n for n in wanted if n not in self.final_outputs]
        try:
            outputs = self._run(extra)
        except ModelError as exc:
            untyped = [n for n in extra if n not in self._types]
            if not untyped:
                raise
            for name in untyped:
                self.skipped[name] = f"no inferred type and ONNX Runtime refused it untyped: {exc}"[:300]
            extra = [n for n in extra if n in self._types]
            outputs = self._run(extra)
        self._check_observer(outputs)
        return {name: outputs[name] for name in wanted if name in outputs}

    def _run(self, extra: Sequence[str]) -> dict[str, np.ndarray]:
        key = tuple(extra)
        self.runs += 1
        if self._last is not None and self._last[0] == key:
            return self._last[1].run(self._feeds)
        self._last = None  # the previous exposure's session goes before the next one is built (memory)
        graph = self._working.graph
        base = len(graph.output)
        for name in extra:
            if name in self._types:
                graph.output.append(self._types[name])
            else:
                graph.output.add().name = name
        try:
            path = self._dir / "exposed.onnx"
            onnx.save(self._working, str(path))
        finally:
            del graph.output[base:]
        session = Session(path, self._providers, self._session)
        self._last = (key, session)
        return session.run(self._feeds)

    def _check_observer(self, outputs: Mapping[str, np.ndarray]) -> None:
        if self._production is None or self.observer_mismatch is not None:
            return
        for name, expected in self._production.items():
            got = outputs.get(name)
            if got is None or not _bitwise_equal(got, expected):
                worst = _max_abs_difference(got, expected)
                self.observer_mismatch = (
                    f"{self._label} output {name!r} changed when intermediates were exposed (max |diff| {worst:.3g})"
                )
                return


class StoredTensors:
    """Tensors captured earlier (a baseline's intermediates), served like a runner that never runs."""

    def __init__(self, tensors: Mapping[str, np.ndarray]) -> None:
        self._tensors = tensors
        self.producible = frozenset(tensors)
        self.runs = 0
        self.skipped: dict[str, str] = {}

    def fetch(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        return {name: np.asarray(self._tensors[name]) for name in names if name in self._tensors}


def save_optimized_model(
    model_path: Path, providers: Sequence[ProviderSpec], session: SessionConfig, directory: Path
) -> Path:
    """The graph ORT really runs for this configuration, as saved by ``optimized_model_filepath``."""
    return save_and_run_optimized(model_path, providers, session, directory, None)[0]


def save_and_run_optimized(
    model_path: Path,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    directory: Path,
    feeds: Mapping[str, np.ndarray] | None,
) -> tuple[Path, dict[str, np.ndarray]]:
    """The saved optimized graph and, with ``feeds``, the plain outputs of the same session (one
    session for both: the save options change nothing that is computed)."""
    entries = {**session.config_entries, **_OPTIMIZED_CONFIG}
    config = session.model_copy(update={"config_entries": entries})
    target = directory / "optimized.onnx"
    built = Session(model_path, providers, config, optimized_model_path=target)
    if not target.is_file():
        raise ModelError(f"ONNX Runtime did not save the optimized graph of {model_path}")
    return target, (built.run(feeds, where="localization feeds") if feeds is not None else {})


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc" or a.dtype.kind == "V":
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(a, b))


def _max_abs_difference(got: np.ndarray | None, expected: np.ndarray) -> float:
    if got is None or np.shape(got) != np.shape(expected):
        return float("inf")
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(np.asarray(got, dtype=np.float64) - np.asarray(expected, dtype=np.float64))
    return float(np.nanmax(diff)) if diff.size else 0.0
