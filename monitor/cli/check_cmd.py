"""``onnxmon check``: run the active baselines now, print a table, exit with the verdict.

Exit codes: 0 every model passed, 1 any drift (a ``fail``), 3 a model could not be
measured (an ``error``) and none drifted, 2 a usage or config error.
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from monitor import jsonsafe
from monitor.cli import common, output, recording
from monitor.config import crosscheck
from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import Settings
from monitor.daemon import child, diagnosis
from monitor.errors import MonitorError
from monitor.files import signature
from monitor.results import CheckResult, Verdict

ERROR_RATIO_HEADER = common.ERROR_RATIO_HEADER
_STYLE = {Verdict.PASS: "green", Verdict.FAIL: "bold red", Verdict.ERROR: "bold yellow"}


def exit_code(results: list[CheckResult]) -> int:
    verdicts = {r.verdict for r in results}
    if Verdict.FAIL in verdicts:
        return 1
    if Verdict.ERROR in verdicts:
        return 3
    return 0


def register(app: typer.Typer) -> None:
    @app.command("check")
    @output.options()
    def check(
        models: list[str] = typer.Argument(None, help="Models to check (default: all in the config)."),
        quiet: bool = common.QuietOption,
        store: bool = typer.Option(True, "--store/--no-store", help="Record the results in the store."),
        diagnose: bool = typer.Option(
            True,
            "--diagnose/--no-diagnose",
            help="On a fail, diagnose it as onnxmon diagnose does (replays within daemon.diagnose_budget) for the"
            " likely cause; --no-diagnose: no replays, the cause ranked from the evidence alone, unweighed.",
        ),
        *,
        out: output.Output,
    ) -> None:
        """Replay each model's benchmark set and compare with its active baseline."""
        settings = common.settings(out.config_file)
        names = models or [m.name for m in settings.models]
        if not names:
            raise MonitorError(f"{settings.source}: no models configured")
        plans = [plan_for(settings, name) for name in names]  # an unknown name fails before anything runs
        # a field naming an output the model lacks would never apply: refused as the config error it is
        crosscheck.refuse_unknown_outputs(settings, names, signature.output_names, signature.output_types)
        if store:
            common.refuse_unready_store(settings)  # an un-migrated store or a missing driver: before measuring
        memory = settings.daemon.memory_limit_mb
        # Each check in its own child with the model's hard timeout, exactly as the daemon runs it.
        results = [child.run_isolated(plan, job=child.measure_only, memory_limit_mb=memory)[0] for plan in plans]
        if diagnose:  # the full diagnosis of each fail, recorded with the run: the line agrees with `diagnose`
            results = [_diagnosed(settings, plan, result, store) for plan, result in zip(plans, results, strict=True)]
        causes = likely_causes(settings, plans, results, store=store)
        recorded = recording.record(settings, results) if store else None
        run_ids = list(recorded.run_ids) if recorded is not None else []
        run_ids += [None] * (len(results) - len(run_ids))

        def text(wide: bool) -> list[Table | str]:
            recorded_as = [f"{r.model} run {i}" for r, i in zip(results, run_ids, strict=True) if i is not None]
            # the run ids are what `incident note`, `diagnose --run` and the run page take
            recorded_line = [f"recorded: {', '.join(recorded_as)}"] if recorded_as else []
            return [render(results, wide=wide), *(f"{model}: {line}" for model, line in causes.items()), *recorded_line]

        out.emit(lambda: [as_json_record(r, i) for r, i in zip(results, run_ids, strict=True)], text, quiet=quiet)
        code = exit_code(results)
        if recorded is not None and not recorded.complete:
            typer.echo(f"onnxmon: warning: {recorded.message()}", err=True)
            code = code or 3  # a drift still says 1; otherwise "not recorded" is "could not measure"
        raise typer.Exit(code)


def as_json_record(result: CheckResult, run_id: int | None = None) -> dict[str, object]:
    """``CheckResult.to_dict`` with RFC 3339 UTC timestamps (the dict itself keeps epoch seconds for the spool),
    and ``run_id``: the run's id in the store (null when not recorded, or spooled for later)."""
    return jsonsafe.with_timestamps(result.to_dict()) | {"run_id": run_id}


def likely_causes(
    settings: Settings, plans: list[CheckPlan], results: list[CheckResult], *, store: bool
) -> dict[str, str]:
    """Per failing model, the one line with the most likely cause (and a similar incident, if any)."""
    failing = [(p, r) for p, r in zip(plans, results, strict=True) if r.verdict is Verdict.FAIL]
    if not failing:
        return {}
    incidents = _incidents(settings) if store else []
    lines = {}
    for plan, result in failing:
        line = diagnosis.headline(plan, result, incidents=incidents)
        if line:
            lines[result.model] = line
    return lines


def _diagnosed(settings: Settings, plan: CheckPlan, result: CheckResult, store: bool) -> CheckResult:
    """A fail with the full diagnosis ``onnxmon diagnose`` makes, recorded with the run."""
    incidents = _incidents(settings) if store else []
    return diagnosis.with_diagnosis(plan, result, budget_s=settings.daemon.diagnose_budget, incidents=incidents)


def _incidents(settings: Settings) -> list[dict[str, Any]]:
    try:
        with common.open_store(settings) as opened:
            return diagnosis.stored_incidents(opened)
    except Exception:  # no store, no matches: the check itself is not affected
        return []


MODEL_ROW = "(model)"
"""The ``output`` cell of a model's own row: its verdict and the check-level reasons, apart from any output's."""


def render(results: list[CheckResult], *, wide: bool = False) -> Table:
    """Per model, one row with its verdict and the check-level reasons (``output`` is ``(model)``), then one row
    per output with that output's verdict, metrics and reasons only; ``wide`` adds the baseline id.

    A check-level failure (``provider_fallback``, ``model_changed`` under ``numeric: warn``) fails the model
    while every output passes: the model's row says ``fail`` and why, and no output's cell claims the reason.
    """
    table = common.PlainTable(show_lines=False, pad_edge=False)
    columns = ["model", "output", "verdict", "max abs", "max rel", ERROR_RATIO_HEADER, "cosine", "SNR dB", "mismatch"]
    for column in [*columns, "reasons", *(["baseline"] if wide else [])]:
        table.add_column(column, overflow="fold")
    for result in results:
        baseline = [result.baseline_id or "-"] if wide else []
        attribution = [f"attribution: {result.attribution}"] if result.attribution else []
        model_reasons = "; ".join([str(r) for r in result.reasons] + attribution)
        verdict = Text(result.verdict.value, style=_STYLE[result.verdict])
        table.add_row(result.model, MODEL_ROW, verdict, *[""] * 6, model_reasons, *baseline)
        for out in result.outputs:
            m = out.metrics
            decided = [f"{d.kind} decisions {d.flipped}/{d.total} flipped"] if (d := out.decisions) is not None else []
            reasons = "; ".join([r.code for r in out.reasons] + [f"warning {w.code}" for w in out.warnings] + decided)
            table.add_row(
                "",
                out.name,
                Text(out.verdict.value, style=_STYLE[out.verdict]),
                common.fmt(m.max_abs_error),
                common.fmt(m.max_rel_error),
                common.ratio(out.error_ratio),
                common.fmt(m.cosine_similarity, ".6f"),
                common.fmt(m.snr_db, ".1f"),
                common.fmt(m.mismatch_ratio, ".2%"),
                reasons,
                *([""] if wide else []),
            )
        for hazard in _lint_lines(result):
            table.add_row(*[""] * 9, hazard, *([""] if wide else []))
    if common.narrow_terminal() and not wide:  # 80 columns: reasons keep room; -o wide and JSON have all
        table.columns = [c for c in table.columns if c.header not in NARROW_DROPS]
    return table


NARROW_DROPS = ("max rel", "SNR dB")
"""Columns a narrow terminal's check table leaves out: max abs, error ÷ tolerance and cosine say as much."""


def _lint_lines(result: CheckResult, most: int = 5) -> list[str]:
    """The export hazards (errors and warnings) lint found in the model, as warnings under its rows."""
    found = result.details.get("lint")
    hazards = found.get("hazards", []) if isinstance(found, dict) else []
    shown = [h for h in hazards if isinstance(h, dict) and h.get("severity") in ("error", "warning")]
    lines = [f"lint: {h['severity']} {h['code']} at {h['node']}: {h['detail']}" for h in shown[:most]]
    if len(shown) > most:
        lines.append(f"lint: {len(shown) - most} more; run onnxmon lint {result.model}")
    return lines
