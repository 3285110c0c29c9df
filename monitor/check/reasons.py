"""Why a check failed, in words: model, benchmark set and environment changes, and the attribution.

Attribution of a failing check, in order of precedence: ``model_changed`` (the model
file hash, or the hash of one of its external-data files, differs from the baseline's),
``benchset_changed``, ``input_mismatch``, ``env_changed`` (a stable environment field differs,
or a provider fell back), otherwise ``numeric`` (same stack, different numbers).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from monitor import modeldiff
from monitor.config.plan import CheckPlan
from monitor.details import ConcurrencyDetails, Details, EnvChange
from monitor.errors import MonitorError
from monitor.files import baselines, modelfile
from monitor.results import CheckResult, Reason, Verdict
from monitor.runtime import envsnap


def with_model_change(plan: CheckPlan, result: CheckResult) -> CheckResult:
    """``result`` plus ``model_changed`` reasons when the model file (or its external data) differs.

    Why: a swapped model usually fails before anything is compared (other inputs, other
    outputs), and "error: model_error" alone hides the cause an on-call engineer needs first.
    Never raises: without a readable baseline or model file there is nothing to add.
    """
    if any(r.code == "model_changed" for r in result.reasons):
        return result
    try:
        baseline = baselines.active(plan.baselines_dir, plan.model.name)
        if baseline is None:
            return result
        identity = modelfile.identify(plan.model.path)
    except Exception:
        return result
    added: list[Reason] = []
    if identity.sha256 != baseline.meta.model_sha256:
        detail = f"{plan.model.path} sha256 {identity.sha256[:12]} != baseline {baseline.meta.model_sha256[:12]}"
        added.append(Reason("model_changed", detail))
    added += external_data_changes(plan.model.path.name, identity.external_data, baseline.meta.external_data)
    if not added:
        return result
    added, described = describe_model_change(added, baseline, plan.model.path)
    details: Details = {**result.details, "model_diff": described}
    return dataclasses.replace(result, reasons=(*result.reasons, *added), model_sha256=identity.sha256, details=details)


def describe_model_change(
    reasons: list[Reason], baseline: baselines.Baseline, path: Path
) -> tuple[list[Reason], dict[str, Any]]:
    """The static diff of the model file against the baseline's manifest, and its summary in the reason.

    The first ``model_changed`` reason gains the diff's summary ("tensor conv1.weight changed,
    read by Conv_3"; "412 initializers float32->float16"); the whole diff (lists capped) goes to
    ``details["model_diff"]`` for the API and the run page. A baseline without a manifest (made
    before manifests existed) or a file ``onnx`` cannot read yields a note, never a failed check.
    """
    try:
        manifest = baseline.document(baselines.MODEL_MANIFEST)
        if manifest is None:
            return reasons, {"note": f"baseline {baseline.id} keeps no model manifest; re-capture to get a diff"}
        diff = modeldiff.diff_against_manifest(manifest, modeldiff.load_model(path), old_name=baseline.id)
    except MonitorError as exc:
        return reasons, {"note": f"no model diff: {exc}"}
    described = diff.to_dict(limit=50)
    if not diff:  # another file with the same graph: re-serialized, or metadata/doc strings edited
        described["summary"] = [
            "same values, nodes and types as the baseline's model: only bytes the diff does not compare"
            " differ (metadata, doc strings, value_info shapes, serialization)"
        ]
    first = next(i for i, r in enumerate(reasons) if r.code == "model_changed")
    summary = "; ".join((*described["summary"], *_named_changes(described)))
    changed = dataclasses.replace(reasons[first], detail=f"{reasons[first].detail}: {summary}"[:2000])
    return [*reasons[:first], changed, *reasons[first + 1 :]], described


def _named_changes(described: Mapping[str, Any], most: int = 3) -> tuple[str, ...]:
    """For a few changed weights, each by name with the nodes that read it: the culprit, by itself."""
    tensors = described.get("changed_tensors", [])
    attributes = described.get("changed_attributes", [])
    if len(tensors) + len(attributes) > most:
        return ()
    named = []
    for tensor in tensors:
        readers = ", ".join(f"{c['node']} ({c['op_type']})" for c in tensor.get("consumers", [])[:most])
        named.append(
            f"{tensor['name']} {tensor.get('status', 'changed')}" + (f", read by {readers}" if readers else "")
        )
    for attribute in attributes:
        named.append(f"attribute {attribute.get('attribute')} of {attribute.get('node')} changed")
    return tuple(named)


def external_data_changes(model_file: str, now: Mapping[str, str], before: Mapping[str, str]) -> list[Reason]:
    """One ``model_changed`` reason per external-data file whose sha256 differs from the baseline's.

    A model saved with external data keeps its weights beside the ``.onnx``: an edited weight
    file leaves the ``.onnx`` hash unchanged, so each file is compared on its own and named.
    A file the model newly references, or no longer references, is a change too.
    """
    reasons = []
    for location in sorted(set(now) | set(before)):
        old, new = before.get(location), now.get(location)
        if old == new:
            continue
        if old is None:
            detail = f"{model_file} now references external data {location} (not in the baseline)"
        elif new is None:
            detail = f"{model_file} no longer references external data {location} (the baseline's had it)"
        else:
            detail = f"external data {location} of {model_file} sha256 {new[:12]} != baseline {old[:12]}"
        reasons.append(Reason("model_changed", detail))
    return reasons


def concurrency_reasons(found: ConcurrencyDetails) -> list[Reason]:
    """``concurrency_variant`` reasons of ``checks.concurrency``'s record: one per output whose concurrent
    answers differ bitwise from the serial ones (naming its samples), one for calls that raised only then."""
    reasons = []
    calls, threads = found.get("calls", 0), found.get("threads", 0)
    for name, entry in found.get("differing", {}).items():
        samples = entry.get("samples", [])
        shown = ", ".join(str(s) for s in samples[:10]) + (", ..." if len(samples) > 10 else "")
        detail = (
            f"{entry.get('answers_differing', 0)} of {calls} answers from {threads} threads at once differ bitwise"
            f" from the serial answer (samples {shown})"
        )
        if "elements_differing" in entry:
            largest = entry.get("max_abs_difference")
            detail += (
                f"; sample {entry.get('first_sample')}: {entry['elements_differing']} of {entry.get('elements')}"
                " elements" + (f", max |diff| {largest:.3g}" if largest is not None else "")
            )
        if entry.get("shape_or_dtype"):
            detail += f"; {entry['shape_or_dtype']}"
        if entry.get("serial_rerun_bitwise") is False:
            detail += "; a serial re-run differs too: not deterministic even serially"
        elif entry.get("serial_rerun_bitwise"):
            detail += "; serial re-runs agree bitwise: it differs only under concurrency"
        reasons.append(Reason("concurrency_variant", detail[:2000], name))
    failures = found.get("failures", [])
    if failures:
        samples = sorted({f.get("sample", -1) for f in failures})
        detail = (
            f"{len(failures)} of {calls} calls from {threads} threads at once raised (samples"
            f" {', '.join(str(s) for s in samples[:10])}): {failures[0].get('error', '')}"
        )
        reasons.append(Reason("concurrency_variant", detail[:2000]))
    return reasons


def attribute(verdict: Verdict, reasons: list[Reason], env_changes: list[EnvChange]) -> str | None:
    """Why a failing check failed, by precedence; None unless the verdict is ``fail``."""
    if verdict is not Verdict.FAIL:
        return None
    codes = {r.code for r in reasons}
    for code in ("model_changed", "benchset_changed", "input_mismatch"):  # input_mismatch: fed differently
        if code in codes:
            return code
    if "provider_fallback" in codes or any(c.get("stable") for c in env_changes):
        return "env_changed"
    return "numeric"


def env_changes(baseline_env: Mapping[str, Any], snapshot: envsnap.EnvSnapshot) -> list[EnvChange]:
    """The snapshot's changes against the baseline's environment (none when the baseline recorded none)."""
    if not baseline_env.get("fingerprint"):
        return []
    return [c.to_dict() for c in envsnap.diff(envsnap.EnvSnapshot.from_dict(dict(baseline_env)), snapshot)]
