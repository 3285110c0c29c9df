"""Batch sizes (and other dynamic dims) frozen into the graph: a baked Reshape/Expand constant, and fixed input dims.

Why: the legacy exporter traces one call; ``x.view(1, -1)`` or ``x.reshape(8, -1)`` becomes a
constant shape, so a model whose input axis 0 is dynamic still only works, or silently mixes
samples, at the batch size it was exported with. The graph shows it when a Reshape's (or an
Expand's) constant target fixes the leading dim while its data's leading dim is dynamic
(``onnx.shape_inference`` keeps the symbolic ``batch`` through the graph). Found with
``batch_invariance`` too, at run time: the two agree on such a model.

``baked_dim``: the same for another dynamic dim: a Reshape constant fixing, at the same axis, a
named dynamic dim of its data that is not a batch (``[seq, batch, 64] -> [20, -1, 64]`` under a
dynamic ``seq``; ``batch_invariance`` cannot see it, it varies the batch only).

``fixed_dim``: an input dim fixed in the model while the benchmark set (or the batch-invariance
check) needs several sizes on that axis; the check would refuse the samples with ``model_error``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set

from monitor.lint.graph import DEFAULT_DOMAINS, LintGraph, Node
from monitor.lint.hazards import Hazard, hazard

# input name -> axis -> the sizes the benchmark set (or batch invariance) feeds on that axis
VariedDims = Mapping[str, Mapping[int, Set[int]]]


def check(graph: LintGraph) -> Iterator[Hazard]:
    dynamic_batch = _dynamic_batch_inputs(graph)
    batch_names = _batch_dim_names(graph)
    dynamic_names = _dynamic_dim_names(graph)
    for node in graph.nodes:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in ("Reshape", "Expand"):
            continue
        target = graph.constant(node.input(1))
        if target is None or target.ndim != 1 or target.size == 0:
            continue
        baked = _baked_dim(graph, node, target, dynamic_names - batch_names)
        if baked is not None:
            yield baked
            continue
        if not dynamic_batch:
            continue  # a fixed batch: every constant agrees with it (a set that varies it is fixed_dim's)
        leading = int(target[0])
        data_shape = graph.shapes.get(node.input(0))
        data_leading = data_shape[0] if data_shape else None
        if not (isinstance(data_leading, str) and data_leading in batch_names):
            # inference lost the name (a Resize by scales gives unk__N): follow the data to an input
            traced = _batch_source(graph, node.input(0), {})
            data_leading = traced if traced else (data_leading if isinstance(data_leading, int) else None)
        found = _baked(node, leading, data_leading, dynamic_batch)
        if found:
            yield found


def _baked(node: Node, leading: int, data_leading: int | str | None, dynamic_batch: list[str]) -> Hazard | None:
    shown = f"constant shape starts with {leading}"
    if node.op_type == "Reshape" and leading > 0 and isinstance(data_leading, str):
        return hazard(
            "baked_batch",
            node.name,
            node.op_type,
            f"{shown} while its input's leading dim {data_leading!r} is dynamic: only batch {leading} works"
            " (or samples are mixed); export with x.reshape(x.shape[0], ...) / x.flatten(1)",
        )
    if node.op_type == "Expand" and leading > 1:
        if isinstance(data_leading, str):
            return hazard(
                "baked_batch",
                node.name,
                node.op_type,
                f"{shown} while its input's leading dim {data_leading!r} is dynamic: any other batch fails",
            )
        if data_leading == 1 and dynamic_batch:
            return hazard(
                "baked_batch",
                node.name,
                node.op_type,
                f"{shown}, a fixed batch, while input(s) {dynamic_batch} have a dynamic batch dim:"
                f" the expanded tensor keeps batch {leading} whatever the batch fed",
                severity="warning",
            )
    return None


def _baked_dim(graph: LintGraph, node: Node, target: object, names: set[str]) -> Hazard | None:
    """A Reshape constant fixing, at some axis, a dynamic non-batch dim its data has there (``seq``).

    Only where the data has the target's rank, so that axis ``i`` of both is the same axis: ``[seq,
    batch, 64] -> Reshape [20, -1, 64]`` keeps working for any batch, only at sequence length 20.
    """
    data_shape = graph.shapes.get(node.input(0))
    values = [int(v) for v in target]  # type: ignore[attr-defined]
    if node.op_type != "Reshape" or not data_shape or len(data_shape) != len(values):
        return None
    for axis, (size, dim) in enumerate(zip(values, data_shape, strict=True)):
        if size > 1 and isinstance(dim, str) and dim not in names:  # inference lost the name (unk__N)
            dim = _dim_source(graph, node.input(0), axis, {}) or dim
        if size > 1 and isinstance(dim, str) and dim in names:
            return hazard(
                "baked_dim",
                node.name,
                node.op_type,
                f"constant shape {values} fixes axis {axis} to {size} while its input's axis {axis} is the dynamic"
                f" {dim!r}: only {dim} {size} works (other lengths are mixed into the -1 axis or fail); export"
                f" with x.shape[{axis}] (or 0 to copy it) instead of a constant",
            )
    return None


# Ops whose output has the rank of their data inputs and keeps each of their axes (elementwise).
KEEPS_AXES = frozenset(
    {
        "LayerNormalization",
        "Relu",
        "LeakyRelu",
        "Sigmoid",
        "Tanh",
        "Gelu",
        "Erf",
        "Softmax",
        "LogSoftmax",
        "Clip",
        "Dropout",
        "Identity",
        "Cast",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Sqrt",
        "Exp",
        "Neg",
        "Abs",
        "Where",
        "QuantizeLinear",
        "DequantizeLinear",
        "SkipLayerNormalization",
    }
)


def _dim_source(graph: LintGraph, tensor: str, axis: int, seen: dict[tuple[str, int], str], depth: int = 0) -> str:
    """The graph input dim name axis ``axis`` of ``tensor`` comes from ("" if none found).

    Shape inference loses a dim's name behind ops it cannot follow symbolically (a BERT's attention
    mask, a Slice of position embeddings): BERT's last hidden state is ``[unk__51, unk__52, 32]``.
    This follows the data back through ops that keep that axis: elementwise ops (inputs of the
    output's rank), a MatMul's rows, a Gather's indices (an embedding lookup), to a graph input.
    """
    key = (tensor, axis)
    if key in seen or depth > 500:
        return seen.get(key, "")
    seen[key] = ""
    if graph.is_graph_input(tensor):
        for value in graph.model.graph.input:
            dims = value.type.tensor_type.shape.dim if value.name == tensor else []
            if axis < len(dims) and not dims[axis].HasField("dim_value"):
                seen[key] = dims[axis].dim_param
        return seen[key]
    producer = graph.producers.get(tensor)
    rank = len(graph.shapes.get(tensor) or ())
    if producer is None or not rank:
        return ""
    follow: list[tuple[str, int]] = []
    data = [n for n in producer.proto.input if n and n not in graph.initializers and n not in graph.constant_nodes]
    if producer.op_type in KEEPS_AXES:
        follow = [(n, axis) for n in data if len(graph.shapes.get(n) or ()) == rank]
    elif producer.op_type == "MatMul" and axis < rank - 1 and data and data[0] == producer.proto.input[0]:
        follow = [(data[0], axis)]
    elif producer.op_type == "Gather" and producer.attribute("axis", 0) == 0 and len(producer.proto.input) > 1:
        indices = producer.proto.input[1]
        if indices in data and axis < len(graph.shapes.get(indices) or ()):
            follow = [(indices, axis)]
    for name, at in follow:
        found = _dim_source(graph, name, at, seen, depth + 1)
        if found:
            seen[key] = found
            return found
    return ""


def _dynamic_dim_names(graph: LintGraph) -> set[str]:
    """Every named dynamic dim of the graph inputs (``batch``, ``seq``, ``height``)."""
    names = set()
    for value in graph.model.graph.input:
        if value.name in graph.initializers or not value.type.HasField("tensor_type"):
            continue
        names |= {d.dim_param for d in value.type.tensor_type.shape.dim if d.dim_param and not d.HasField("dim_value")}
    return names


# Ops whose output keeps the leading dim of their (non-constant) data inputs.
KEEPS_LEADING = (KEEPS_AXES - {"SkipLayerNormalization"}) | frozenset(
    {
        "AveragePool",
        "BatchNormalization",
        "Conv",
        "ConvTranspose",
        "Flatten",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "InstanceNormalization",
        "MatMul",
        "MaxPool",
        "Pad",
        "ReduceMax",
        "ReduceMean",
        "ReduceSum",
        "Resize",
        "Upsample",
    }
)


def _batch_source(graph: LintGraph, tensor: str, seen: dict[str, str], depth: int = 0) -> str:
    """The name of the dynamic input leading dim ``tensor``'s leading dim comes from ("" if none found)."""
    if tensor in seen or depth > 500:
        return seen.get(tensor, "")
    seen[tensor] = ""
    if graph.is_graph_input(tensor):
        for value in graph.model.graph.input:
            dims = value.type.tensor_type.shape.dim if value.name == tensor else []
            if dims and not dims[0].HasField("dim_value"):
                seen[tensor] = dims[0].dim_param or "?"
        return seen[tensor]
    producer = graph.producers.get(tensor)
    if producer is None or producer.op_type not in KEEPS_LEADING:
        return ""
    for name in producer.proto.input:
        if name and graph.constant(name) is None:
            found = _batch_source(graph, name, seen, depth + 1)
            if found:
                seen[tensor] = found
                return found
        if producer.op_type not in ("Add", "Sub", "Mul", "Div", "Where", "Pow"):
            break  # only the first input carries the data of the other ops
    return ""


def _batch_dim_names(graph: LintGraph) -> set[str]:
    """The names of the inputs' dynamic leading dims (``batch``); empty when one of them is unnamed."""
    names = set()
    for value in graph.model.graph.input:
        if value.name in graph.initializers or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            if not dims[0].dim_param:
                return set()
            names.add(dims[0].dim_param)
    return names


def _dynamic_batch_inputs(graph: LintGraph) -> list[str]:
    found = []
    for value in graph.model.graph.input:
        if value.name in graph.initializers or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            found.append(value.name)
    return found


def check_fixed_dims(graph: LintGraph, varied: VariedDims) -> Iterator[Hazard]:
    """A fixed input dim where ``varied`` feeds several sizes on that axis."""
    for value in graph.model.graph.input:
        if value.name in graph.initializers or value.name not in varied:
            continue
        if not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            sizes = sorted(varied[value.name].get(axis, ()))
            if len(sizes) > 1 and dim.HasField("dim_value"):
                yield hazard(
                    "fixed_dim",
                    f"input {value.name}",
                    "graph input",
                    f"input {value.name!r} axis {axis} is fixed to {dim.dim_value} in the model, but the"
                    f" benchmark set / batch invariance feeds sizes {sizes}; export it as a dynamic axis",
                )
