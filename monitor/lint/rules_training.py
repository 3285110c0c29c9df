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
"""

from __future__ import annotations

from collections.abc import Iterator

from monitor.lint.graph import DEFAULT_DOMAINS, LintGraph
from monitor.lint.hazards import Hazard, hazard


def check(graph: LintGraph) -> Iterator[Hazard]:
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
