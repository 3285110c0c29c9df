"""Which ONNX tensor holds which PyTorch module's output: the map a layer-by-layer comparison needs.

Both exporters say, per node, which module it came from:

- the **legacy** (TorchScript) exporter in the node *name*: ``/block2/skip/skip.0/Conv`` is a
  ``Conv`` of module ``block2.skip.0`` (each scope component is an attribute name, or the qualified
  name of a ``Sequential``/``ModuleList`` child);
- the **dynamo** exporter in the node's ``metadata_props``: ``pkg.torch.onnx.name_scopes`` is the
  list of qualified module names from the root down, ending with the aten op
  (``['', 'block2', 'block2.skip', 'block2.skip.1', '_native_batch_norm_legit_no_training_5']``),
  beside ``pkg.torch.onnx.class_hierarchy`` (the classes, same length).

A module's ONNX counterpart is the tensor its nodes produce and the rest of the graph reads (or a
graph output). A module with no node of its own gets one in one case: a **BatchNorm folded into
the Conv before it** (legacy exporter): the Conv's output tensor is the BatchNorm's output, so the
BatchNorm module takes it over and the Conv module (whose pre-BatchNorm value exists nowhere in
the ONNX graph) has no counterpart. The dynamo exporter already names the folded node after the
BatchNorm. A module called more than once per forward is ambiguous and left out.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

NAME_SCOPES = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY = "pkg.torch.onnx.class_hierarchy"
FLOAT_TYPES = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
)


@dataclass(frozen=True)
class ModuleCall:
    """One module call seen by the forward hooks: who, its class, and where its input came from."""

    qualified: str
    class_name: str
    input_from: str | None  # the module whose output was this call's first tensor input, if any


@dataclass(frozen=True)
class TensorMap:
    """Module qualified name -> ONNX tensor name, and how the scopes were read."""

    tensors: Mapping[str, str]
    exporter: str  # legacy | dynamo | unknown
    folded: Mapping[str, str]  # BatchNorm module -> the Conv module whose tensor it took over
    # legacy scope -> the module it is (``stem`` -> ``net.stem``) under a parent whose forward was bypassed
    bypassed: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "exporter": self.exporter,
            "tensors": dict(self.tensors),
            "folded": dict(self.folded),
            "bypassed": dict(self.bypassed),
        }

    def hint(self) -> str:
        """Why the coverage may be low, or how it was kept: a parent module whose ``forward`` was bypassed."""
        if not self.bypassed:
            return ""
        parents = sorted({q.rsplit(".", 1)[0] for q in self.bypassed.values()})
        return (
            f"module(s) {parents} were not called as modules (a method such as forward_features() was called"
            " on them directly, timm's idiom), so the legacy exporter scoped their children without their name"
            f" ({', '.join(f'{k!r} is {v!r}' for k, v in sorted(self.bypassed.items())[:4])}); mapped through"
        )


def node_scopes(model: onnx.ModelProto) -> tuple[list[str | None], str]:
    """Per top-level node, the qualified name of the module it came from (None: unknown), and the exporter."""
    scopes: list[str | None] = []
    dynamo = legacy = 0
    for node in model.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        scope = _dynamo_scope(props.get(NAME_SCOPES))
        if scope is not None:
            dynamo += 1
        else:
            scope = _legacy_scope(node.name)
            legacy += scope is not None
        scopes.append(scope)
    exporter = "dynamo" if dynamo else "legacy" if legacy else "unknown"
    return scopes, exporter


def map_modules(model: onnx.ModelProto, calls: Sequence[ModuleCall], float_tensors: frozenset[str]) -> TensorMap:
    """Every module called once that has an ONNX counterpart, with the folded-BatchNorm rule applied."""
    scopes, exporter = node_scopes(model)
    bypassed: dict[str, str] = {}
    if exporter == "legacy":
        bypassed = bypassed_parents(calls)
        scopes = [_through_bypassed(s, bypassed) for s in scopes]
    nodes = list(model.graph.node)
    graph_outputs = {o.name for o in model.graph.output}
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.qualified] = counts.get(call.qualified, 0) + 1
    tensors: dict[str, str] = {}
    for qualified in dict.fromkeys(c.qualified for c in calls):
        if counts[qualified] != 1:
            continue
        tensor = _module_output(qualified, nodes, scopes, graph_outputs, float_tensors)
        if tensor is not None:
            tensors[qualified] = tensor
    folded: dict[str, str] = {}
    for call in calls:
        if not _is_batchnorm(call.class_name) or call.qualified in tensors or counts[call.qualified] != 1:
            continue
        conv = call.input_from
        if (
            conv is not None
            and conv in tensors
            and _owns_nodes(conv, scopes)
            and not _owns_nodes(call.qualified, scopes)
        ):
            tensors[call.qualified] = tensors.pop(conv)
            folded[call.qualified] = conv
    return TensorMap(tensors=tensors, exporter=exporter, folded=folded, bypassed=bypassed)


def bypassed_parents(calls: Sequence[ModuleCall]) -> dict[str, str]:
    """Legacy scope -> module, for the children of a module whose ``forward`` never ran as a call.

    ``wrapper.net.forward_features(x)`` calls ``net``'s children but not ``net``: TorchScript's scope
    stack then lacks ``net``, and ``net.stem`` is scoped ``stem``. Kept only where ``stem`` is no module
    called by that name itself (no ambiguity).
    """
    called = {c.qualified for c in calls}
    found: dict[str, str] = {}
    for qualified in called:
        parent, _, name = qualified.rpartition(".")
        if parent and parent not in called and name not in called:
            found.setdefault(name, qualified)
    return found


def _through_bypassed(scope: str | None, bypassed: Mapping[str, str]) -> str | None:
    if not scope:
        return scope
    head, dot, rest = scope.partition(".")
    return f"{bypassed[head]}{dot}{rest}" if head in bypassed else scope


def counted_tensors(model: onnx.ModelProto) -> list[str]:
    """The tensors coverage is counted over: every output of a non-``Constant`` top-level node."""
    return [out for node in model.graph.node if node.op_type != "Constant" for out in node.output if out]


def _dynamo_scope(text: str | None) -> str | None:
    if not text:
        return None
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(names, list) or len(names) < 2 or not all(isinstance(n, str) for n in names):
        return None
    if names[0] != "":  # e.g. '_empty_nn_module_stack_from_metadata_hook': no module recorded
        return None
    return str(names[-2])  # the innermost module; the last entry is the aten op


def _legacy_scope(name: str) -> str | None:
    """``/block1/conv1/Conv`` -> ``block1.conv1``; ``/Flatten`` -> '' (the root); None if not scoped."""
    if not name.startswith("/"):
        return None
    parts = name.split("/")[1:-1]
    qualified, previous = "", ""
    for part in parts:
        if not part:
            return None
        # A Sequential child's component repeats its parent's: "skip.0" under "skip" is child "0".
        child = part[len(previous) + 1 :] if previous and part.startswith(previous + ".") else part
        qualified, previous = f"{qualified}.{child}".lstrip("."), part
    return qualified


def _inside(scope: str | None, qualified: str) -> bool:
    if scope is None:
        return False
    return qualified == "" or scope == qualified or scope.startswith(qualified + ".")


def _owns_nodes(qualified: str, scopes: Sequence[str | None]) -> bool:
    return any(_inside(s, qualified) for s in scopes)


def _module_output(
    qualified: str,
    nodes: Sequence[onnx.NodeProto],
    scopes: Sequence[str | None],
    graph_outputs: set[str],
    float_tensors: frozenset[str],
) -> str | None:
    """The last float tensor the module's nodes produce that a node outside it reads, or a graph output."""
    inside = [i for i, s in enumerate(scopes) if _inside(s, qualified) and nodes[i].op_type != "Constant"]
    if not inside:
        return None
    members = set(inside)
    read_outside = {name for i, node in enumerate(nodes) if i not in members for name in node.input}
    candidates = [
        out
        for i in inside
        for out in nodes[i].output
        if out and (out in read_outside or out in graph_outputs) and out in float_tensors
    ]
    return candidates[-1] if candidates else None


def _is_batchnorm(class_name: str) -> bool:
    return class_name.split(".")[-1].startswith("BatchNorm")
