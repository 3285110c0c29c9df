"""``lint_model``: every export hazard of one model file, each naming its node.

Static: the model is read with the ``onnx`` package (weights included, one tensor at a time for
the fp16 rule), never run. Two rules need facts from outside the file, handed in by the caller:
what the installed runtime loads (``RuntimeSupport``, from ``monitor.runtime.support``) and the
sizes the benchmark set feeds per input axis (``VariedDims``). Without them those rules are
skipped and the report says so in ``facts["skipped"]``.

A rule that raises on a strange model becomes one ``lint_error`` hazard naming the rule; the
other rules still run. Only an unreadable file is a ``ModelError`` (the CLI exits 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import onnx

from monitor.errors import ModelError
from monitor.lint.graph import LintGraph, external_tensors, read
from monitor.lint.hazards import Hazard, LintReport, hazard, ordered
from monitor.lint.rules import batch, fp16, qdq, resize, training, validity, versions
from monitor.lint.rules.batch import VariedDims
from monitor.lint.rules.versions import RuntimeSupport

Rule = Callable[[LintGraph], Iterable[Hazard]]
RULES: tuple[tuple[str, Rule], ...] = (
    ("validity", validity.check),
    ("training", training.check),
    ("resize", resize.check),
    ("batch", batch.check),
    ("fp16", fp16.check),
    ("fp16_ranges", fp16.check_fp32_initializers),
    ("qdq", qdq.check),
)


def lint_model(
    path: Path | str,
    *,
    support: RuntimeSupport | None = None,
    varied: VariedDims | None = None,
    activations: Mapping[str, float] | None = None,
) -> LintReport:
    """The hazards of the model at ``path``; ``ModelError`` naming the file when it cannot be read.

    ``activations``: the largest |x| of float32 intermediates on the benchmark set (the caller ran
    them; lint never does), for the fp16 activation rule.
    """
    path = Path(path)
    return lint_proto(
        load(path), name=str(path), support=support, varied=varied, base_dir=str(path.parent), activations=activations
    )


def lint_proto(
    model: onnx.ModelProto,
    *,
    name: str = "",
    support: RuntimeSupport | None = None,
    varied: VariedDims | None = None,
    base_dir: str = "",
    activations: Mapping[str, float] | None = None,
) -> LintReport:
    """The hazards of an already parsed model; external tensors are read from ``base_dir`` when needed."""
    graph = read(model, base_dir=base_dir)
    rules: list[tuple[str, Rule]] = list(RULES)
    if activations:
        rules.append(("fp16_activations", lambda g: fp16.check_activations(g, activations)))
    skipped = []
    if support is not None:
        rules.append(("versions", lambda g: versions.check(g, support)))
    else:
        skipped.append("versions (no runtime support given)")
    if varied:
        rules.append(("fixed_dims", lambda g: batch.check_fixed_dims(g, varied)))
    else:
        skipped.append("fixed_dims (no benchmark set given)")
    found: list[Hazard] = []
    for rule_name, rule in rules:
        try:
            found.extend(rule(graph))
        except Exception as exc:  # a malformed attribute, a tensor numpy cannot read: report, go on
            found.append(
                hazard("lint_error", "model", "ModelProto", f"rule {rule_name} failed: {type(exc).__name__}: {exc}")
            )
    facts = {
        "ir_version": int(model.ir_version),
        "opsets": {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "nodes": len(graph.nodes),
        "skipped": skipped,
    }
    if support is not None:
        facts["runtime"] = support.to_dict()
    return LintReport(model=name, hazards=ordered(found), facts=facts)


def load(path: Path) -> onnx.ModelProto:
    """The model's protobuf, external data left on disk (checked present); failures are ``ModelError``s."""
    if not path.exists():
        raise ModelError(f"model file {path} not found")
    if not path.is_file():
        raise ModelError(f"model file {path} is not a regular file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several kinds of decode errors
        raise ModelError(f"model file {path} is not a valid ONNX model: {' '.join(str(exc).split())}") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"model file {path} is not a valid ONNX model: it has no graph")
    for tensor in external_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = (path.parent / location).resolve()
        if not location or path.parent.resolve() not in target.parents or not target.is_file():
            raise ModelError(
                f"external data {location!r} of tensor {tensor.name!r} in model file {path} is missing"
                " or outside the model's folder"
            )
    return model
