"""Incidents noted by people, matched to new failures by their signature.

A failure's *signature* is what makes two failures "the same problem": the stable environment
fields that changed against the baseline, the op type of the localized node, the failing outputs
and the reason codes. ``signature(run)`` takes it from a run's plain data (a ``CheckResult.to_dict()``
or a stored run's fields) so it is the same whether the run is fresh or read back.

``similar(signature, incidents)`` scores each incident's stored signature against it and keeps
those at or above ``THRESHOLD``, best first. The score weighs the environment change most (an
upgrade that broke one model breaks the next the same way), then the localized op type, the
reasons and the outputs; two empty parts agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

THRESHOLD = 0.6
_WEIGHTS = {"env_fields": 0.4, "op_types": 0.2, "reasons": 0.25, "outputs": 0.15}
# Reasons every failure has (it failed) say nothing about which failure it is.
_GENERIC = frozenset({"atol_rtol"})


def signature(
    *,
    reasons: Iterable[str],
    env_diff: Iterable[Mapping[str, Any]],
    failing_outputs: Iterable[str],
    op_types: Iterable[str] = (),
) -> dict[str, list[str]]:
    """The comparable signature of a failure (sorted lists, so it is stable JSON)."""
    return {
        "env_fields": sorted({str(c.get("field")) for c in env_diff if c.get("stable")}),
        "op_types": sorted(set(map(str, op_types))),
        "reasons": sorted(set(map(str, reasons))),
        "outputs": sorted(set(map(str, failing_outputs))),
    }


def of_run(run: Mapping[str, Any], op_types: Iterable[str] = ()) -> dict[str, list[str]]:
    """The signature of a run's plain data (``CheckResult.to_dict()`` shape)."""
    outputs = run.get("outputs") or []
    details = run.get("details") or {}
    reasons = [r.get("code") for r in run.get("reasons") or []]
    reasons += [r.get("code") for o in outputs for r in o.get("reasons") or []]
    localized = op_types or localized_op_types(details.get("localization"))
    return signature(
        reasons=[r for r in reasons if r],
        env_diff=details.get("env_diff") or [],
        failing_outputs=[o.get("name") for o in outputs if o.get("verdict") != "pass"],
        op_types=localized,
    )


def localized_op_types(report: Any) -> list[str]:
    """Op types of a localization report's first changed / first out-of-tolerance nodes.

    A fused node brings its members' (``fused_op_types``): a rule about Conv must match the Conv inside a
    fused Conv+Add+Relu, which the report names on the Relu.
    """
    if not isinstance(report, Mapping):
        return []
    found = []
    for key in ("first_out_of_tolerance", "first_changed"):
        node = report.get(key)
        if isinstance(node, Mapping) and node.get("op_type"):
            found.append(str(node["op_type"]))
            found += [str(t) for t in node.get("fused_op_types") or () if t and str(t) not in found]
    return found


def score(a: Mapping[str, Sequence[str]], b: Mapping[str, Sequence[str]]) -> float:
    """Similarity of two signatures in [0, 1]; below ``THRESHOLD`` when their environment changes share nothing.

    Another upgrade is another problem, however alike the rest looks: when either side changed
    environment fields and the two share none, the score is capped under the threshold. A signature
    with no failing output and no reason (an incident noted on a passing run) is no failure at all
    and scores 0 against anything: its empty parts would otherwise "agree" with every failure's.
    """
    if not _failed(a) or not _failed(b):
        return 0.0
    total = 0.0
    envs = set(a.get("env_fields") or ()), set(b.get("env_fields") or ())
    for part, weight in _WEIGHTS.items():
        left, right = set(a.get(part) or ()), set(b.get(part) or ())
        if part == "reasons":
            left, right = left - _GENERIC, right - _GENERIC
        if not left and not right:
            total += weight
        elif left and right:
            total += weight * len(left & right) / len(left | right)
    if (envs[0] or envs[1]) and not envs[0] & envs[1]:
        total = min(total, THRESHOLD - 0.1)
    return round(total, 3)


def _failed(part: Mapping[str, Sequence[str]]) -> bool:
    return bool(part.get("outputs") or part.get("reasons"))


def similar(
    wanted: Mapping[str, Sequence[str]], incidents: Iterable[Mapping[str, Any]], *, threshold: float = THRESHOLD
) -> list[dict[str, Any]]:
    """Incidents whose signature scores at least ``threshold`` against ``wanted``, best (then newest) first."""
    found = []
    for incident in incidents:
        value = score(wanted, incident.get("signature") or {})
        if value >= threshold:
            found.append({**dict(incident), "score": value})
    found.sort(key=lambda i: (-i["score"], -int(i.get("id") or 0)))
    return found
