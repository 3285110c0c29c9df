"""The graph ORT really runs, mapped back to the model: which model tensor each optimized tensor holds.

At levels above ``disable`` ONNX Runtime rewrites the graph before running it: fusions replace
nodes (``FusedConv``, ``*/MatMulAddFusion``, ``*/MatmulTransposeFusion/``, QDQ -> integer kernels)
and the CPU NCHWc layout pass computes convolutions in a blocked channel layout, in tensors it
names ``reorder_token_*``. Exposing the *model's* tensors stops some of those rewrites and can
change the numbers (the observer effect); exposing the *optimized* graph's tensors does not, but
their names are not the model's. This module joins the two, by tensor names and topology:

* a tensor name both graphs have holds the same value (an optimized node that keeps a model
  tensor's name computes that tensor, e.g. ``FusedGemm`` writes the ``Relu``'s output);
* an NCHWc node is named after the model tensor it computes (``<tensor>_nchwc``, ``<tensor>_bn_nchwc``,
  ORT's ``GenerateNodeName``); its blocked output is turned back into the model's NCHW tensor by
  a ``ReorderOutput`` node added here (``channels`` from the model's inferred shape), which is
  exactly what ORT inserts itself where a non-NCHWc node reads it;
* the model nodes an optimized node *replaced* (``fused_from``) are those reached walking back from
  the model node that produces its tensor, stopping at tensors the optimized graph also holds.

Run the augmented optimized model at level ``disable`` (it is already optimized) and every answer
still names the model's nodes, with the optimized node and ``fused_from`` beside it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.localize.graph import (
    ExposingRunner,
    graph_nodes,
    load_model,
    node_outputs,
    save_and_run_optimized,
    value_types,
)

NCHWC_DOMAIN = "com.microsoft.nchwc"
# ``<tensor>_nchwc`` / ``<tensor>_bn_nchwc``, with the ``_token_N`` ORT adds to keep names unique.
_NCHWC_NAME = re.compile(r"^(?P<tensor>.*?)(?P<bn>_bn)?_nchwc(?:_token_\d+)?$")
ADDED_PREFIX = "onnxmon/"
# Prefixes ORT's optimizers put on tensors they re-create (an fp16 model on CPU runs in fp32 with
# ``InsertedPrecisionFreeCast_act0`` for ``act0``).
GENERATED_PREFIXES = ("InsertedPrecisionFreeCast_",)
ACTIVATIONS = frozenset({"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish"})


@dataclass(frozen=True)
class Origin:
    """Where a model tensor comes from in the optimized graph."""

    optimized_node: str
    fused_from: tuple[str, ...]  # model node names the optimized node replaced (topological); () if one


@dataclass(frozen=True)
class OptimizedMap:
    """The optimized model made to produce the model's tensors, and where each came from."""

    model: onnx.ModelProto  # the optimized graph plus a ReorderOutput per blocked model tensor
    origins: Mapping[str, Origin]  # model tensor -> its origin, for every model tensor it produces
    total: int  # how many tensors the model's nodes produce

    @property
    def kept(self) -> int:
        return len(self.origins)

    def describe(self) -> str:
        fused = sum(1 for o in self.origins.values() if o.fused_from)
        return (
            f"the optimized graph holds {self.kept} of the model's {self.total} tensors"
            f" ({fused} computed by fused nodes)"
        )


def map_optimized(model: onnx.ModelProto, optimized: onnx.ModelProto) -> OptimizedMap:
    """Join ``optimized`` (as saved by ``optimized_model_filepath``) to ``model``; see the module docstring."""
    model_tensors = node_outputs(model)
    wanted = set(model_tensors) | {o.name for o in model.graph.output}
    producer_name = {
        out: node.name or f"{node.op_type}_{i}"
        for i, node in enumerate(optimized.graph.node)
        for out in node.output
        if out
    }
    reorders = {n.output[0]: n.input[0] for n in optimized.graph.node if n.op_type == "ReorderOutput" and n.input}

    def computed_by(tensor: str) -> str:
        # A tensor written by ORT's own ReorderOutput belongs to the node that computed the blocked tensor.
        return producer_name.get(reorders.get(tensor, ""), producer_name[tensor])

    holds = {name: computed_by(name) for name in wanted if name in producer_name}
    # A name the optimized graph defines otherwise (constant folding turns a node's output into an
    # initializer of the same name) cannot be given to an added node: the graph would define it twice.
    taken = {t.name for t in optimized.graph.initializer} | {i.name for i in optimized.graph.input}
    augmented = onnx.ModelProto()
    augmented.CopyFrom(optimized)
    types = value_types(model)
    added: list[onnx.NodeProto] = []
    for tensor in sorted(producer_name):  # ``InsertedPrecisionFreeCast_X``: an fp16 model's X computed in fp32
        original = _strip_generated(tensor)
        if original != tensor and original in wanted and original not in holds and original not in taken:
            added += _expose_as(tensor, original, types, blocked_channels=None)
            holds[original] = computed_by(tensor)
    channels = _channels(types)
    for node in optimized.graph.node:
        if node.domain != NCHWC_DOMAIN or node.op_type == "ReorderOutput" or not node.output:
            continue
        if node.output[0] in reorders:
            continue  # ORT reorders it into a model tensor itself: that tensor is what it holds
        named = _nchwc_tensor(node.name, wanted)
        tensor = _fused_tensor(node, named, model) if named is not None else None
        if tensor is None or tensor in holds or tensor in taken or tensor not in channels:
            continue
        added += _expose_as(node.output[0], tensor, types, blocked_channels=channels[tensor])
        holds[tensor] = node.name
    augmented.graph.node.extend(added)
    # The saved graph may still declare a tensor it no longer computes (an fp16 model's ``act0``,
    # typed float32 after ORT's precision-free casts): the added nodes' outputs are typed by ORT.
    produced = {out for node in added for out in node.output}
    kept_info = [vi for vi in augmented.graph.value_info if vi.name not in produced]
    del augmented.graph.value_info[:]
    augmented.graph.value_info.extend(kept_info)
    if added and not any(op.domain == NCHWC_DOMAIN for op in augmented.opset_import):
        augmented.opset_import.append(helper.make_opsetid(NCHWC_DOMAIN, 1))
    return OptimizedMap(augmented, _origins(model, holds), len(model_tensors))


def _expose_as(
    source: str, tensor: str, types: Mapping[str, onnx.ValueInfoProto], *, blocked_channels: int | None
) -> list[onnx.NodeProto]:
    """Nodes that turn the optimized graph's ``source`` into the model's ``tensor``: back from the NCHWc
    layout (``ReorderOutput``), and cast to the model's dtype where ORT computes a float16 tensor in
    float32 (the ``InsertedPrecisionFreeCast_`` prefix)."""
    nodes: list[onnx.NodeProto] = []
    generated = _strip_generated(source) != source or _strip_generated(tensor) != tensor
    info = types.get(tensor)
    dtype = info.type.tensor_type.elem_type if info is not None else 0
    cast = generated and dtype not in (0, onnx.TensorProto.FLOAT)
    if blocked_channels is not None:
        target = f"{ADDED_PREFIX}nchw/{tensor}" if cast else tensor
        nodes.append(
            helper.make_node(
                "ReorderOutput",
                [source],
                [target],
                name=f"{ADDED_PREFIX}{tensor}",
                domain=NCHWC_DOMAIN,
                channels=blocked_channels,
            )
        )
        source = target
    if cast:
        nodes.append(helper.make_node("Cast", [source], [tensor], name=f"{ADDED_PREFIX}cast/{tensor}", to=dtype))
    elif source != tensor:
        nodes.append(helper.make_node("Identity", [source], [tensor], name=f"{ADDED_PREFIX}identity/{tensor}"))
    return nodes


def _strip_generated(name: str) -> str:
    for prefix in GENERATED_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def _nchwc_tensor(node_name: str, wanted: set[str]) -> str | None:
    match = _NCHWC_NAME.match(node_name)
    if match is None:
        return None
    stem = _strip_generated(match["tensor"])
    for candidate in (stem, stem + (match["bn"] or "")):
        if candidate in wanted:
            return candidate
    return None


def _fused_tensor(node: onnx.NodeProto, tensor: str, model: onnx.ModelProto) -> str | None:
    """The model tensor an NCHWc node really computes. The pass names a node after its own output
    before fusing a following Add (the ``Sum`` input) and activation into it; then the node computes
    that Add's or activation's output (found in the model), unless ``tensor`` already *is* an
    activation's output (an activation fused earlier, at level ``extended``). ``None`` when the
    model does not say which."""
    producer_op = {out: n.op_type for n in model.graph.node for out in n.output}
    has_sum = len(node.input) > 3 and bool(node.input[3])
    has_activation = any(a.name == "activation" for a in node.attribute)
    if has_sum:
        found = _only_consumer_output(model, tensor, frozenset({"Add", "Sum"}))
        if found is None:
            return None
        tensor = found
    if has_activation and producer_op.get(tensor) not in ACTIVATIONS:
        return _only_consumer_output(model, tensor, ACTIVATIONS)
    return tensor


def _only_consumer_output(model: onnx.ModelProto, tensor: str, ops: frozenset[str]) -> str | None:
    readers = [n for n in model.graph.node if tensor in n.input]
    if len(readers) != 1 or readers[0].op_type not in ops or not readers[0].output:
        return None
    return str(readers[0].output[0])


def _channels(types: Mapping[str, onnx.ValueInfoProto]) -> dict[str, int]:
    """Model tensor -> its static channel count (dim 1 of a 3-D to 5-D tensor), from shape inference."""
    found: dict[str, int] = {}
    for name, info in types.items():
        dims = info.type.tensor_type.shape.dim
        if len(dims) >= 3 and dims[1].HasField("dim_value") and dims[1].dim_value > 0:
            found[name] = dims[1].dim_value
    return found


def _origins(model: onnx.ModelProto, holds: Mapping[str, str]) -> dict[str, Origin]:
    """Per held model tensor: the optimized node and the model nodes it stands for (walked back, stopping
    at tensors the optimized graph holds too, and at graph inputs and initializers)."""
    nodes = graph_nodes(model)
    producer = {out: node for node in nodes for out in node.outputs}
    origins: dict[str, Origin] = {}
    for tensor, optimized_node in holds.items():
        start = producer.get(tensor)
        if start is None:
            continue  # a graph input passed through as an output
        group: dict[int, str] = {}
        todo = [start]
        while todo:
            node = todo.pop()
            if node.index in group:
                continue
            group[node.index] = node.name
            todo.extend(producer[i] for i in node.inputs if i in producer and i not in holds)
        names = tuple(group[i] for i in sorted(group) if nodes[i].op_type != "Constant")
        origins[tensor] = Origin(optimized_node, names if len(names) > 1 else ())
    return origins


def optimized_runner(
    model_path: Path,
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    *,
    providers: Sequence[ProviderSpec],
    session: SessionConfig,
    directory: Path,
) -> tuple[ExposingRunner, OptimizedMap, dict[str, np.ndarray]]:
    """An ``ExposingRunner`` over the graph ORT runs for ``session`` (saved, mapped, run at ``disable``),
    the map, and the plain outputs of the session that saved it (what the exposed runs must equal)."""
    saved, plain = save_and_run_optimized(model_path, providers, session, directory, feeds)
    mapping = map_optimized(model, load_model(saved))
    runner = ExposingRunner(
        mapping.model,
        feeds,
        providers=providers,
        session=session.model_copy(update={"graph_optimization_level": "disable"}),
        production=plain,
        label="optimized",
    )
    return runner, mapping, plain
