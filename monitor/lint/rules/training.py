"""Training mode left in an inference graph: BatchNormalization and Dropout.

Why: ``torch.onnx.export`` of a module still in ``train()`` mode (or with
``training=TrainingMode.TRAINING``) keeps BatchNorm on *batch* statistics and Dropout active,
so every output depends on the rest of the batch or on a random mask. The graph says so:

- BatchNormalization: ``training_mode=1`` (opset 14+); before opset 14 the optional
  ``mean``/``var``/saved outputs exist only in training mode (opset 9-13); ``is_test=0``
  before opset 7.
- Dropout: the ``training_mode`` input (opset 12+) is a constant true, or is computed at run
  time (then it may be true); before opset 7 the ``is_test=0`` attribute. A Dropout that is
  off is harmless (ONNX Runtime removes it), so only the active ones are reported.
- Dropout written as ops: the dynamo exporter turns a train-mode ``nn.Dropout(inplace=True)``
  (``aten.bernoulli.p``) into ``RandomUniformLike → Less → Cast → Div → Mul``, no Dropout op. A
  random op whose node metadata (``pkg.torch.onnx.class_hierarchy``, ``namespace``) names a Dropout
  or a Bernoulli draw, or whose draw is compared with a threshold (a keep mask), is one; reported
  once per module, at the random op, with the module named from ``pkg.torch.onnx.name_scopes``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from monitor.lint.graph import DEFAULT_DOMAINS, LintGraph, Node
from monitor.lint.hazards import Hazard, hazard

RANDOM_OPS = frozenset({"RandomUniformLike", "RandomUniform", "RandomNormalLike", "RandomNormal", "Bernoulli"})
_MASK_COMPARISONS = frozenset({"Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
_DROPOUT_MARKERS = ("dropout", "bernoulli")


def check(graph: LintGraph) -> Iterator[Hazard]:
    yield from _random_mask_dropouts(graph)
    for node in graph.nodes:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        if node.op_type == "BatchNormalization":
            why = _batchnorm_training(
                graph, node.proto.output, node.attribute("training_mode", 0), node.attribute("is_test")
            )
            if why:
                yield hazard(
                    "batchnorm_training",
                    node.name,
                    node.op_type,
                    f"{why}: normalizes with the statistics of the batch it is given, not the running"
                    " ones; export with model.eval()",
                )
        elif node.op_type == "Dropout":
            why = _dropout_training(graph, node.input(2), node.attribute("is_test"), node.input(1))
            if why:
                yield hazard(
                    "dropout_training",
                    node.name,
                    node.op_type,
                    f"{why}: zeroes a random share of its input at inference; export with model.eval()",
                    severity="warning" if why.startswith("training_mode is computed") else None,
                )


def _batchnorm_training(graph: LintGraph, outputs: object, training_mode: object, is_test: object) -> str:
    if training_mode == 1:
        return "training_mode=1"
    if is_test == 0:
        return "is_test=0"
    present = [o for o in list(outputs)[1:] if o]  # type: ignore[call-overload]
    if present and 9 <= graph.opset < 14:
        return f"it has the training-only outputs {present}"
    return ""


def _dropout_training(graph: LintGraph, training_input: str, is_test: object, ratio_input: str) -> str:
    if is_test == 0:
        return "is_test=0"
    if not training_input:
        return ""
    value = graph.constant(training_input)
    ratio = graph.constant(ratio_input) if ratio_input else None
    ratio_text = f" with ratio {float(ratio.reshape(-1)[0]):g}" if ratio is not None and ratio.size else ""
    if value is None:
        return f"training_mode is computed at run time ({training_input!r}), so it may be on{ratio_text}"
    if value.size and bool(value.reshape(-1)[0]):
        return f"training_mode input {training_input!r} is the constant true{ratio_text}"
    return ""


def _random_mask_dropouts(graph: LintGraph) -> Iterator[Hazard]:
    """Dropouts the exporter wrote as a random keep mask (see the module docstring), once per module."""
    seen: set[str] = set()
    for node in graph.nodes:
        if node.op_type not in RANDOM_OPS or node.domain not in DEFAULT_DOMAINS:
            continue
        metadata = {p.key: p.value for p in node.proto.metadata_props}
        origin = f"{metadata.get('pkg.torch.onnx.class_hierarchy', '')} {metadata.get('namespace', '')}".lower()
        comparisons = [c for c, _ in graph.consumers.get(node.proto.output[0] if node.proto.output else "", [])]
        masks = [c for c in comparisons if c.op_type in _MASK_COMPARISONS]
        if not any(marker in origin for marker in _DROPOUT_MARKERS) and not masks:
            continue
        module = _module(metadata.get("pkg.torch.onnx.name_scopes", ""))
        key = module or node.name
        if key in seen:
            continue
        seen.add(key)
        where = f" of module {module!r}" if module else ""
        yield hazard(
            "dropout_training",
            node.name,
            node.op_type,
            f"a random keep mask{where} ({_chain(graph, node, masks)}{_threshold(graph, masks)}): a Dropout left"
            " in training mode, written as ops (the dynamo exporter's aten.bernoulli), zeroes a random share of"
            " its input at every run; export with model.eval()",
        )


def _module(name_scopes: str) -> str:
    """``"['', 'classifier', 'classifier.2', 'bernoulli']"`` -> ``classifier.2`` (the innermost module)."""
    try:
        scopes = ast.literal_eval(name_scopes) if name_scopes else []
    except (ValueError, SyntaxError):
        return ""
    names = [str(s) for s in scopes if s] if isinstance(scopes, list) else []
    return names[-2] if len(names) >= 2 else ""


def _chain(graph: LintGraph, node: Node, masks: list[Node]) -> str:
    """The ops from the random draw on, as far as a single consumer leads (at most five)."""
    ops, current = [node.op_type], masks[0] if masks else None
    while current is not None and len(ops) < 5:
        ops.append(current.op_type)
        following = graph.consumers.get(current.proto.output[0] if current.proto.output else "", [])
        current = following[0][0] if len(following) == 1 else None
    return " → ".join(ops)


def _threshold(graph: LintGraph, masks: list[Node]) -> str:
    for mask in masks:
        value = graph.constant(mask.input(1))
        if value is not None and value.size == 1:
            return f", keep {float(value.reshape(-1)[0]):g}"
    return ""
