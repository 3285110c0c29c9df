"""One run (``/runs/{id}``): verdict, reasons, attribution, every output's metrics, the environment diff
against the baseline's environment, and the localization report when the daemon localized the failure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.api.environments import run_env_diff
from monitor.api.params import page_id
from monitor.api.web import decisions, diagnosis, localization, model_diff
from monitor.api.web.env_page import NotFound, diff_view
from monitor.api.web.html import (
    badge,
    esc,
    facts,
    fingerprint_link,
    link,
    num,
    page,
    section,
    table,
    url,
    verdict_badge,
    when,
)
from monitor.results import OutputStats, Reason
from monitor.store import RunRecord

if TYPE_CHECKING:
    from monitor.api.handle import DaemonHandle

# (label, OutputMetrics field) of the main table; every metric is in "all metrics" below it.
_MAIN_METRICS = (
    ("max |err|", "max_abs_error"),
    ("mean |err|", "mean_abs_error"),
    ("RMS err", "rms_error"),
    ("max rel", "max_rel_error"),
    ("cosine", "cosine_similarity"),
    ("SNR dB", "snr_db"),
    ("mismatch", "mismatch_ratio"),
)


def render(handle: DaemonHandle, run_ref: str, now: datetime) -> str:
    run_id = page_id(run_ref)
    record = handle.store.run(run_id) if run_id else None
    if record is None:
        raise NotFound(404, f"no run {run_ref!r} in the history")
    model_link = link(url("models", record.model), record.model)
    rehearsal = (
        f" {badge('candidate stack', 'info', title='a rehearsal (onnxmon rehearse): not a production run')}"
        if record.candidate
        else ""
    )
    head = (
        f"<h1>Run #{record.id} of {model_link} {verdict_badge(record.verdict.value)}{rehearsal}</h1>"
        f'<p class="sub">finished {when(record.finished_at, now)}</p>'
    )
    parts = [
        head,
        '<div class="grid">',
        section("Run", _facts(record, now)),
        section("Why", _reasons(record)),
        "</div>",
        section("Outputs", outputs_table(record.outputs) + _all_metrics(record.outputs)),
        decisions.render(record.outputs),
        section("Environment against the baseline's", diff_view(run_env_diff(handle, record), "baseline", "this run")),
        model_diff.render(record.details),
        localization.render(record.details, explorer_url=f"/runs/{record.id}/model-explorer.json"),
        _diagnosis(handle, record),
    ]
    if record.timings:
        rows = ([esc(k), f'<span class="num">{esc(num(v))} s</span>'] for k, v in record.timings.items())
        parts.append(section("Timings", table(["Phase", "Seconds"], rows)))
    crumbs = [("Models", "/"), (record.model, url("models", record.model)), (f"run #{record.id}", None)]
    return page(f"Run #{record.id} · {record.model}", "".join(parts), crumbs=crumbs)


def _diagnosis(handle: DaemonHandle, record: RunRecord) -> str:
    """The diagnosis section on a run that did not pass: causes, experiments, incidents, the form."""
    if record.verdict.value == "pass":
        return ""
    from monitor.store import incidents

    document = incidents.diagnosis(handle.store, record.id) or record.details.get("diagnosis")
    return diagnosis.render(record.id, document, incidents.similar_to_run(handle.store, record.id))


def _facts(record: RunRecord, now: datetime) -> str:
    fallback = (
        set(record.providers_requested) - set(record.providers_effective) if record.providers_effective else set()
    )
    effective = esc(", ".join(record.providers_effective) or "—")
    if fallback:
        effective += " " + badge("fallback", "warn", title=f"not used: {', '.join(sorted(fallback))}")
    baseline = link(url("models", record.model) + "#baselines", record.baseline_id) if record.baseline_id else "none"
    return facts(
        [
            ("started", when(record.started_at, now)),
            ("duration", esc(f"{num(record.duration_s)} s")),
            ("baseline", baseline),
            ("environment", fingerprint_link(record.environment_fingerprint)),
            ("model sha256", f'<span class="mono">{esc((record.model_sha256 or "—")[:16])}</span>'),
            ("benchset", esc(f"{record.benchset or '—'} ({record.sample_count} samples)")),
            ("providers asked", esc(", ".join(record.providers_requested) or "—")),
            ("providers used", effective),
            ("node / pod", esc(f"{record.node or '—'} / {record.pod or '—'}")),
        ]
    )


def _reasons(record: RunRecord) -> str:
    parts = []
    if record.attribution:
        parts.append(f"<p>Attributed to {badge(record.attribution, 'info')}</p>")
    reasons = list(record.reasons) + [r for o in record.outputs for r in o.reasons]
    if reasons:
        parts.append(reason_list(reasons))
    elif record.verdict == "pass":
        within = "no decision flipped" if any(o.warnings for o in record.outputs) else "every output within tolerance"
        parts.append(f'<p class="muted">{within}</p>')
    else:
        parts.append('<p class="muted">no reason recorded</p>')
    warnings = [r for o in record.outputs for r in o.warnings]
    if warnings:  # tolerance.numeric: warn
        parts.append(
            f"<p>{badge('warning', 'warn')} numeric drift that flipped no decision</p>" + reason_list(warnings)
        )
    return "".join(parts)


def reason_list(reasons: Sequence[Reason]) -> str:
    items = (
        f'<li><span class="reason-code">{esc(r.code)}</span>'
        + (f' <span class="mono">[{esc(r.output)}]</span>' if r.output else "")
        + (f": {esc(r.detail)}" if r.detail else "")
        + "</li>"
        for r in reasons
    )
    return f'<ul class="reasons">{"".join(items)}</ul>'


def outputs_table(outputs: Sequence[OutputStats]) -> str:
    """Each output's verdict, tolerance and main metrics; "error ÷ tolerance" is ``error_ratio``."""
    headers = ["Output", "Verdict", "dtype", "shape", "atol", "rtol", "error ÷ tolerance"] + [
        label for label, _ in _MAIN_METRICS
    ]
    rows = []
    for o in outputs:
        metrics = o.metrics.to_dict()
        rows.append(
            [
                f'<span class="mono">{esc(o.name)}</span>',
                verdict_badge(o.verdict.value),
                esc(o.dtype or "—"),
                esc("×".join(str(d) for d in o.shape) or "—"),
                esc(num(o.tolerance.atol)),
                esc(num(o.tolerance.rtol)),
                _ratio(o),
                *(esc(num(metrics[field])) for _, field in _MAIN_METRICS),
            ]
        )
    return table(headers, rows, css="metrics", empty="no output was compared")


def _ratio(output: OutputStats) -> str:
    """The exact ``|err| ÷ (atol + rtol·|b|)`` when known, else its bound ``max |err| ÷ atol`` (rtol only adds room)."""
    value = output.error_ratio
    atol, error = output.tolerance.atol, output.metrics.max_abs_error
    if math.isnan(value) and math.isinf(error):
        value = math.inf  # an infinite error is infinitely far from any finite tolerance
    elif math.isnan(value) and output.is_measured and atol > 0 and math.isfinite(error):
        bound = esc(num(error / atol))
        return f'<span title="upper bound: max |err| ÷ atol; rtol adds headroom">≤ {bound}</span>'
    text = esc(num(value))
    return f'<strong class="over">{text}</strong>' if value > 1 else text


def _all_metrics(outputs: Sequence[OutputStats]) -> str:
    if not outputs:
        return ""
    names = list(outputs[0].metrics.to_dict())
    tolerance_names = list(outputs[0].tolerance.to_dict())
    rows = [[esc(name)] + [esc(num(o.metrics.to_dict()[name])) for o in outputs] for name in names]
    rows += [
        [esc(f"tolerance {name}")] + [esc(num(o.tolerance.to_dict()[name])) for o in outputs]
        for name in tolerance_names
    ]
    inner = table(["metric", *(o.name for o in outputs)], rows, css="metrics")
    return f"<details><summary>All metrics</summary>{inner}</details>"


def model_explorer(handle: DaemonHandle, run_ref: str) -> dict[str, Any]:
    """The run's localization as Model Explorer node data; ``NotFound`` for no such run.

    A run that was not localized has valid node data that colours nothing (an empty ``results``).
    """
    run_id = page_id(run_ref)  # ASCII digits only, as the run page itself (issue 30 B11)
    record = handle.store.run(run_id) if run_id else None
    if record is None:
        raise NotFound(404, f"no run {run_ref!r}")
    known = {m.name: m.path for m in handle.settings.models}
    return localization.node_data(record.details, known.get(record.model, Path("/nonexistent")))
