"""What a model file change says about a drift: the model diff's kinds, and the causes they support.

``model_change_kinds`` reads a stored model diff (``ModelDiff.to_dict``): QDQ nodes added
(``quantized``), scales or zero points moved on the same graph (``requantized``), float16 / bfloat16
tensors (``precision``), nodes changed (``structure``), other initializer values (``weights``).
``model_hypotheses`` turns them into causes for a run that failed by ``model_changed``;
``verify_hypotheses`` into causes for a lower-precision file checked against its framework's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from monitor.diagnose.result import Hypothesis
from monitor.results import CheckResult

_QDQ = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinear", "Integer")
_LOW_PRECISION = ("float16", "bfloat16", "FLOAT16", "BFLOAT16")


def model_hypotheses(codes: set[str], model_diff: Any) -> list[Hypothesis]:
    """Causes a ``model_changed`` run's model diff supports; none when the diff found nothing computed moved
    (a file re-saved with other metadata: blaming its weights would send a person after the wrong fix)."""
    if "model_changed" not in codes:
        return []
    if isinstance(model_diff, Mapping) and model_diff.get("identical") is True:
        return []
    kinds = model_change_kinds(model_diff)
    summary = "; ".join(model_diff.get("summary", [])[:3]) if isinstance(model_diff, Mapping) else ""
    evidence = (
        f"model file differs from the baseline's: {summary}" if summary else "model file differs from the baseline's",
    )
    fixes = {
        "model_quantized": "deploy the float model, or capture a new baseline for the quantized one"
        " after checking its accuracy",
        "model_precision_changed": "deploy the float32 model, or keep sensitive ops in float32 when converting",
        "model_structure_changed": "deploy the baseline's model, or capture a new baseline for the new graph",
        "model_requantized": "the build re-calibrated: deploy the baseline's quantized model, or freeze its"
        " quantization parameters (same calibration data; onnxmon coverage, onnxmon calibrate)",
        "model_weights_changed": "deploy the baseline's weights, or capture a new baseline if the new weights"
        " are intended",
    }
    ordered = [
        "model_quantized",
        "model_requantized",
        "model_precision_changed",
        "model_structure_changed",
        "model_weights_changed",
    ]
    causes = [c for c in ordered if c.removeprefix("model_").split("_")[0] in kinds] or ["model_weights_changed"]
    return [Hypothesis(c, 0.8 - 0.1 * i, evidence, fixes[c], "evidence") for i, c in enumerate(causes)]


def verify_hypotheses(run: CheckResult, codes: set[str], kinds: set[str]) -> list[Hypothesis]:
    """The verify flow: a quantized or fp16 file checked directly against its framework's (fp32) outputs.

    The file is the baseline's own (no ``model_changed``), yet what it computes in lower precision is
    exactly what a reference made in the framework does not: the conversion is the likely cause.
    """
    if run.details.get("baseline_source") != "reference" or "model_changed" in codes:
        return []
    found = []
    if "quantized" in kinds:
        evidence = ("the model file is quantized (QDQ or integer ops) and is checked against its framework's outputs",)
        fix = "judge the quantized model by its task metric, or keep the sensitive layers in float (onnxmon sqnr)"
        found.append(Hypothesis("model_quantized", 0.65, evidence, fix, "evidence"))
    if "precision" in kinds:
        evidence = ("the model file computes in float16/bfloat16 and is checked against its framework's outputs",)
        fix = "loosen the tolerance to fp16's rounding, or keep sensitive ops in float32 when converting"
        found.append(Hypothesis("model_precision_changed", 0.6, evidence, fix, "evidence"))
    return found


def model_change_kinds(model_diff: Any) -> set[str]:
    """What a model diff shows: ``quantized``, ``requantized``, ``precision``, ``structure``, ``weights``.

    ``requantized``: scales or zero points moved (``quantization_params``); their tensors are not
    counted as changed weights there, so a re-calibrated build of the same graph is not a weight change.
    """
    if not isinstance(model_diff, Mapping):
        return set()
    kinds: set[str] = set()
    added = [str(n.get("op_type", "")) for n in model_diff.get("nodes_added", []) if isinstance(n, Mapping)]
    if any(marker in op for op in added for marker in _QDQ):
        kinds.add("quantized")
    qparams = {str(p.get("name")) for p in model_diff.get("quantization_params", []) if isinstance(p, Mapping)}
    for tensor in model_diff.get("changed_tensors", []):
        if str(tensor.get("name")) in qparams:
            continue
        old, new = str(tensor.get("old_dtype")), str(tensor.get("new_dtype"))
        if old != new and new in _LOW_PRECISION:
            kinds.add("precision")
        elif old != new and ("int8" in new.lower()):
            kinds.add("quantized")
        elif tensor.get("status") == "changed" and old == new:
            kinds.add("weights")
    if qparams:
        kinds.add("requantized")
    summary = " ".join(model_diff.get("summary", []))
    if "float16" in summary and "→" in summary:
        kinds.add("precision")
    if model_diff.get("nodes_added") or model_diff.get("nodes_removed") or model_diff.get("nodes_changed"):
        kinds.add("structure")
    if model_diff.get("changed_attributes"):
        kinds.add("weights")
    return kinds
