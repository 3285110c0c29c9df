"""``onnxmon diagnose MODEL [--run ID]``: why did it drift? Controlled re-runs and ranked causes.

Without ``--run`` the model is checked now (isolated, as ``onnxmon check`` does) and that result is
diagnosed and recorded with its diagnosis; with ``--run ID`` the stored run is diagnosed and the
diagnosis is stored with it. Each experiment runs in its own child with its timeout; the whole
diagnosis stays within ``--budget`` (default ``daemon.diagnose_budget``). A run that passed has
nothing to diagnose: no hypotheses, no replays, exit 0. Exit codes: 0 a diagnosis was made (whatever
it found) or there was nothing to diagnose, 2 usage (unknown model or run), 3 could not diagnose (no store for
``--run``; the run could not measure, verdict ``error``: the diagnosis printed is its evidence alone).
"""

from __future__ import annotations

from typing import Any

import typer

from monitor.cli import common, output, recording
from monitor.config.plan import plan_for
from monitor.config.settings import Settings
from monitor.daemon import child
from monitor.daemon.diagnosis import diagnose_run
from monitor.errors import MonitorError
from monitor.results import CheckResult


def register(app: typer.Typer) -> None:
    @app.command("diagnose")
    @output.options()
    def diagnose(
        model: str = typer.Argument(..., help="The model to diagnose (a name from the config)."),
        run_id: int | None = typer.Option(
            None, "--run", min=1, max=common.MAX_ID, help="Diagnose this stored run instead of a fresh check."
        ),
        budget: float | None = typer.Option(
            None,
            "--budget",
            min=1.0,
            max=86400.0,
            help="Seconds for the whole diagnosis (default: daemon.diagnose_budget).",
        ),
        store: bool = typer.Option(True, "--store/--no-store", help="Record the run and its diagnosis in the store."),
        *,
        out: output.Output,
    ) -> None:
        """Replay the failing samples one knob at a time (each in an isolated child) and rank the likely causes."""
        settings = common.settings(out.config_file)
        plan = plan_for(settings, model)
        seconds = budget or settings.daemon.diagnose_budget
        known = known_incidents(settings)
        if run_id is not None:
            stored = _stored_run(settings, run_id, model)
            verdict = stored.verdict.value
            diagnosis = diagnose_run(plan, stored, budget_s=seconds, incidents=known, run_id=run_id)
            if store and "error" not in diagnosis and verdict != "pass":
                from monitor.store import incidents

                with common.open_store(settings) as opened:
                    incidents.record_diagnosis(opened, run_id, diagnosis)
        else:
            result, _ = child.run_isolated(
                plan, job=child.measure_only, memory_limit_mb=settings.daemon.memory_limit_mb
            )
            verdict = result.verdict.value
            diagnosis = diagnose_run(plan, result, budget_s=seconds, incidents=known)
            if store:
                _record(settings, result, diagnosis if verdict != "pass" else None)
        if "error" in diagnosis:
            raise _could_not(f"diagnosing {model!r} failed: {diagnosis['error']}")
        out.emit(lambda: diagnosis, lambda wide: render(diagnosis))
        if verdict == "error":  # nothing could be replayed: the diagnosis is the evidence alone
            raise typer.Exit(3)


def known_incidents(settings: Settings) -> list[dict[str, Any]]:
    """Every noted incident (newest first) for matching; none when the store cannot be read."""
    try:
        from monitor.store import incidents

        with common.open_store(settings) as store:
            return [i.to_dict() for i in incidents.incidents(store)]
    except Exception:  # an unreachable store must not stop a diagnosis: it only loses the incident matches
        return []


def _stored_run(settings: Settings, run_id: int, model: str) -> CheckResult:
    """Stored run ``run_id`` of ``model`` as the result it was: the stored document converted once, here."""
    from monitor.store import incidents

    try:
        with common.open_store(settings) as store:
            document = incidents.run_document(store, run_id)
    except MonitorError:
        raise
    except Exception as exc:
        raise _could_not(f"the history store cannot be read: {type(exc).__name__}: {exc}") from None
    if document is None:
        raise MonitorError(f"--run {run_id}: no run {run_id} in the history")
    if document["model"] != model:
        raise MonitorError(f"--run {run_id} is a run of {document['model']!r}, not of {model!r}")
    try:
        return CheckResult.from_dict(document)
    except (KeyError, TypeError, ValueError) as exc:  # a row the store wrote in a shape this release cannot read
        unreadable = f"--run {run_id}: the stored run cannot be read as a result: {type(exc).__name__}: {exc}"
        raise _could_not(unreadable) from None


def _record(settings: Settings, result: CheckResult, diagnosis: dict[str, Any] | None) -> None:
    """The fresh check's run, with its diagnosis when it failed (a pass is recorded as the check it was)."""
    import dataclasses

    if diagnosis is not None and "error" in diagnosis:
        return
    if diagnosis is not None:
        result = dataclasses.replace(result, details={**result.details, "diagnosis": diagnosis})
    recorded = recording.record(settings, [result])
    if not recorded.complete:
        typer.echo(f"onnxmon: warning: {recorded.message()}", err=True)


def _could_not(message: str) -> MonitorError:
    error = MonitorError(message)
    error.exit_code = 3
    return error


def render(diagnosis: dict[str, Any]) -> str:
    """The summary line, the causes in rank order (each labelled measured or evidence), the experiments, notes."""
    from monitor.diagnose.result import Diagnosis, similar_line

    if not diagnosis.get("hypotheses") and not diagnosis.get("experiments"):  # a passing run
        which = f"run {diagnosis['run_id']}" if diagnosis.get("run_id") is not None else "the check"
        return f"{diagnosis['model']}: {which} passed: nothing to diagnose"
    found = Diagnosis.from_dict(diagnosis)
    lines = [f"diagnosis of {found.model} ({found.seconds:.1f} s)", "", found.summary(), ""]
    lines.append("causes (measured first; evidence correlates with the drift, nothing measured it):")
    for rank, hypothesis in enumerate(found.hypotheses, 1):
        lines.append(f"  {rank}. {hypothesis.cause}  [{hypothesis.label()}]  fix: {hypothesis.fix}")
        lines += [f"       - {e}" for e in hypothesis.evidence[:4]]
    if found.similar_incidents:
        lines += ["", *(f"  {similar_line(i)}" for i in found.similar_incidents)]
    if found.experiments:
        samples = next((e.extra.get("samples") for e in found.experiments if e.knob == "repeat"), None)
        on = f" on samples {', '.join(map(str, samples))}" if samples else ""
        lines += ["", f"experiments (one knob changed each{on}; against the baseline; current: every scanned sample):"]
        if found.before is not None:
            lines.append(f"  the current setup on those samples: {found.before.describe()}")
        rows = [(f"{e.knob}={e.value}", *_measured(e), e.outcome()) for e in found.experiments]
        head = ("knob", "max |error|", "ULP", "off", "result")
        widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(5)]
        for row in [head, *rows]:
            cells = [f"{row[0]:<{widths[0]}}", *(f"{row[i]:>{widths[i]}}" for i in (1, 2, 3)), row[4]]
            lines.append("  " + "  ".join(cells))
    lines += ["", *found.notes]
    return "\n".join(lines)


def _measured(experiment: Any) -> tuple[str, str, str]:
    """max |error|, max ULP and the share of elements off of an experiment ("-" where not measured)."""
    measure = experiment.measure
    if measure is None:
        return "-", "-", "-"
    ulp = "-" if measure.max_ulp is None else str(measure.max_ulp)
    share = f"{100 * measure.mismatch_share:.3g} %"
    return common.fmt(measure.max_abs_error), ulp, share
