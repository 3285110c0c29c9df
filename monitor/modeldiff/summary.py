"""The summary of a model diff: counts by kind, so a conversion reads as what it is.

An fp16 build reads "412 initializers float32→float16; 2 graph inputs float32→float16; 96 nodes
added (Cast×96)", an int8 build "quantize/dequantize nodes added (DequantizeLinear×103,
QuantizeLinear×40) around 63 nodes", a retrained weight "1 initializer changed values (float32)", a
re-calibrated QDQ build "quantization parameters changed (same graph): 12 scales, 12 zero points, 3
stored tensors re-quantized under their new scale: input_scale 0.01569→0.06275 (+300.0%); ..." (its
scales and zero points are not counted again as changed initializers).
Each line counts every entry, also those the listing leaves out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from monitor.modeldiff.facts import ModelFacts
from monitor.modeldiff.result import IOChange, ModelDiff, NodeEntry, TensorChange

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
INTEGER_OPS = frozenset({"MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeMatMul"})
_NOUNS = {
    "initializer": ("initializer", "initializers"),
    "constant": ("Constant value", "Constant values"),
    "attribute": ("tensor attribute", "tensor attributes"),
}


def by_kind(counts: Mapping[str, int]) -> str:
    """``Cast×96, QuantizeLinear×40``: most frequent first, then by name."""
    return ", ".join(f"{name}×{n}" for name, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _noun(kind: str, n: int) -> str:
    one, many = _NOUNS.get(kind, (kind, kind + "s"))
    return f"{n} {one if n == 1 else many}"


def summarize(diff: ModelDiff, new: ModelFacts) -> tuple[str, ...]:
    """The summary lines of ``diff`` (its own ``summary`` unread), the most telling first: conversions, then
    structure, then values, then header. ``new`` is the newer model's facts (what a QDQ pair sits around)."""
    added, removed, changed, lists = diff.nodes_added, diff.nodes_removed, diff.nodes_changed, diff.changed_attributes
    lines: list[str] = []
    quantization = {param.key for param in diff.quantization}
    lines += _parameter_lines(diff)
    lines += _tensor_lines(c for c in diff.changed_tensors if c.key not in quantization)
    lines += _io_lines(diff.graph_io)
    lines += _quantization_lines(added, new)
    if added:
        lines.append(f"{len(added)} node{'s' * (len(added) != 1)} added ({by_kind(Counter(n.op_type for n in added))})")
    if removed:
        kinds = by_kind(Counter(n.op_type for n in removed))
        lines.append(f"{len(removed)} node{'s' * (len(removed) != 1)} removed ({kinds})")
    if changed:
        what: Counter[str] = Counter()
        for node in changed:
            what.update({_change_kind(field) for field in node.changes})
        lines.append(f"{len(changed)} node{'s' * (len(changed) != 1)} changed ({by_kind(what)})")
    if lists:
        statuses = Counter(f"{c.attribute} {c.status}" for c in lists)
        lines.append(f"{len(lists)} list attribute{'s' * (len(lists) != 1)} ({by_kind(statuses)})")
    for field, (old, new_value) in diff.header.items():
        lines.append(f"{field} {_show(old)}→{_show(new_value)}")
    for status in ("added", "removed"):
        for location in diff.external_data.get(status, ()):
            lines.append(f"external data file {location!r} {status}")
    return tuple(lines)


def _tensor_lines(tensors: Iterable[TensorChange]) -> list[str]:
    groups: Counter[tuple[str, str]] = Counter()
    added: dict[str, Counter[str]] = {}
    removed: dict[str, Counter[str]] = {}
    for change in tensors:
        if change.status == "added":
            added.setdefault(change.kind, Counter())[str(change.new_dtype)] += 1
        elif change.status == "removed":
            removed.setdefault(change.kind, Counter())[str(change.old_dtype)] += 1
        elif change.old_dtype != change.new_dtype:
            groups[(change.kind, f"{change.old_dtype}→{change.new_dtype}")] += 1
        elif change.old_shape != change.new_shape:
            groups[(change.kind, f"reshaped ({change.new_dtype})")] += 1
        else:
            groups[(change.kind, f"changed values ({change.new_dtype})")] += 1
    lines = [f"{_noun(kind, n)} {what}" for (kind, what), n in sorted(groups.items(), key=lambda i: (-i[1], i[0]))]
    for status, found in (("added", added), ("removed", removed)):
        for kind, dtypes in sorted(found.items()):
            lines.append(f"{_noun(kind, sum(dtypes.values()))} {status} ({by_kind(dtypes)})")
    return lines


def _parameter_lines(diff: ModelDiff, named: int = 3) -> list[str]:
    """ "quantization parameters changed (same graph): 6 scales, 6 zero points; ..." with the largest scale changes."""
    if not diff.quantization:
        return []
    counts = Counter(param.role for param in diff.quantization)
    parts = [
        f"{counts[role]} {noun}{'s' * (counts[role] != 1)}"
        for role, noun in (("scale", "scale"), ("zero_point", "zero point"))
        if counts[role]
    ]
    if counts["requantized"]:
        n = counts["requantized"]
        parts.append(f"{n} stored tensor{'s' * (n != 1)} re-quantized under {'its' if n == 1 else 'their'} new scale")
    graph = "same graph" if diff.same_graph else "graph changed too"
    text = f"quantization parameters changed ({graph}): {', '.join(parts)}"
    shown = [param.text() for param in diff.quantization if param.role != "requantized"][:named]
    if shown:
        text += ": " + "; ".join(shown)
        more = sum(1 for param in diff.quantization if param.role != "requantized") - len(shown)
        text += f"; and {more} more" if more > 0 else ""
    return [text]


def _io_lines(graph_io: Iterable[IOChange]) -> list[str]:
    groups: Counter[tuple[str, str]] = Counter()
    for change in graph_io:
        if change.status != "changed" or change.old is None or change.new is None:
            groups[(change.which, change.status)] += 1
        elif change.old[0] != change.new[0]:
            groups[(change.which, f"{change.old[0]}→{change.new[0]}")] += 1
        else:
            groups[(change.which, "shape changed")] += 1
    return [f"{n} graph {which}{'s' * (n != 1)} {what}" for (which, what), n in sorted(groups.items())]


def _quantization_lines(added: Sequence[NodeEntry], new: ModelFacts) -> list[str]:
    qdq = Counter(n.op_type for n in added if n.op_type in QDQ_OPS | INTEGER_OPS)
    if not qdq:
        return []
    dq_outputs = {out for n in added if n.op_type == "DequantizeLinear" for out in new.nodes[n.node].outputs}
    around = {
        key
        for key, node in new.nodes.items()
        if node.op_type not in QDQ_OPS and any(name in dq_outputs for name in node.inputs)
    }
    text = f"quantize/dequantize nodes added ({by_kind(qdq)})"
    if around:
        text += f" around {len(around)} node{'s' * (len(around) != 1)}"
    return [text]


def _change_kind(field: str) -> str:
    if field in ("inputs", "outputs"):
        return f"{field} rewired"
    return "attributes" if field.startswith("attribute ") else field.replace("_", " ")


def _show(value: Any) -> str:
    return "none" if value is None else repr(value) if isinstance(value, str) else str(value)
