"""``onnxmon coverage MODEL`` and ``onnxmon calibrate MODEL``: quantized models and their calibration.

``coverage`` runs a configured QDQ model over a benchmark set (its own, or ``--benchset``) and
lists each quantized tensor (each ``QuantizeLinear`` input) worst first: the share of values its
scale and zero point clip, and the share of its codes used. Exit codes: 0 no tensor clips more than
``--max-clipped``, 1 one does (the inputs left the calibrated range), 2 a usage or config mistake,
3 the coverage could not be measured (also: a model with no ``QuantizeLinear`` to read).

``calibrate`` quantizes a configured float model with ONNX Runtime's quantizer under each
calibration method and measures each (``quant/calibrate.py``); exit 0 when at least one method was
measured, 3 when none could be.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from monitor.cli import common, output
from monitor.config.benchset_schema import BenchsetConfig
from monitor.config.plan import CheckPlan, plan_for
from monitor.config.settings import Settings
from monitor.errors import ConfigError, MonitorError

CRASHED = 3


def register(app: typer.Typer) -> None:
    register_coverage(app)
    register_calibrate(app)


def register_coverage(app: typer.Typer) -> None:
    @app.command("coverage")
    @output.options()
    def coverage_cmd(
        model: str = typer.Argument(..., help="Model name from the config (a QDQ-quantized model)."),
        benchset: str | None = typer.Option(
            None, "--benchset", help="A declared benchmark set to cover (default: the model's own)."
        ),
        max_clipped: float | None = typer.Option(
            None,
            "--max-clipped",
            min=0.0,
            max=1.0,
            help="Exit 1 when a tensor clips more than this share (default: checks.calibration_coverage's, else 0.01).",
        ),
        top: int = typer.Option(20, "--top", min=1, help="Tensors listed in the table (JSON lists all)."),
        *,
        out: output.Output,
    ) -> None:
        """Calibration coverage of a QDQ model: per quantized tensor, values clipped and codes used."""
        from monitor.files import benchsets
        from monitor.quant.coverage import coverage

        settings = common.settings(out.config_file)
        plan = plan_for(settings, model)
        cfg = _benchset_config(settings, plan, benchset)
        configured = plan.model.checks.calibration_coverage
        most = max_clipped if max_clipped is not None else (configured.max_clipped_share if configured else 0.01)
        try:
            bench = benchsets.ensure(cfg, plan.benchsets_dir)
            found = coverage(plan.model.path, bench.iter_samples())
        except MonitorError as exc:
            if exc.exit_code != 1:
                raise
            _crashed(exc)
        except Exception as exc:
            _crashed(exc)
        out_of_range = [t for t in found.tensors if t.clipped_share > most]

        def table(wide: bool) -> list[common.PlainTable | str]:
            shown = common.PlainTable(
                "tensor",
                "clipped",
                "codes used",
                "seen min",
                "seen max",
                "range min",
                "range max",
                title=f"calibration coverage over {bench.name} v{bench.version} ({found.samples} samples)",
            )
            for t in found.tensors[:top]:
                shown.add_row(
                    t.tensor,
                    f"{t.clipped_share:.2%}",
                    f"{t.codes_used}/{t.codes}",
                    common.fmt(t.observed_min),
                    common.fmt(t.observed_max),
                    common.fmt(t.range_min),
                    common.fmt(t.range_max),
                )
            verdict = (
                f"{len(out_of_range)} of {len(found.tensors)} quantized tensors clip more than {most:.2%}"
                if out_of_range
                else f"no quantized tensor clips more than {most:.2%} of its values"
            )
            return [verdict, shown]

        out.emit(
            lambda: {
                **found.to_dict(),
                "benchset": bench.name,
                "benchset_version": bench.version,
                "max_clipped_share": most,
                "out_of_range": [t.tensor for t in out_of_range],
            },
            table,
        )
        if not found.tensors:  # nothing measured is no all-clear
            typer.echo(f"onnxmon: {plan.model.path} has no QuantizeLinear node that could be read", err=True)
            raise typer.Exit(CRASHED)
        raise typer.Exit(1 if out_of_range else 0)


def register_calibrate(app: typer.Typer) -> None:
    @app.command("calibrate")
    @output.options()
    def calibrate_cmd(
        model: str = typer.Argument(..., help="Model name from the config (its file is the float model)."),
        data: str | None = typer.Option(
            None, "--data", help="A declared benchmark set to calibrate on (default: the model's own)."
        ),
        benchset: str | None = typer.Option(
            None, "--benchset", help="A declared set to count decisions and SQNR on (default: the model's own)."
        ),
        methods: list[str] = typer.Option(
            [], "--method", help="MinMax, Entropy or Percentile (repeatable; default: all three)."
        ),
        keep: Path | None = typer.Option(None, "--keep", help="Keep each quantized model in this folder."),
        *,
        out: output.Output,
    ) -> None:
        """Quantize a float model under MinMax, Entropy and Percentile; measure SQNR, flipped decisions, size."""
        from monitor.files import benchsets
        from monitor.quant import calibrate
        from monitor.runtime import quantizer

        unknown = [m for m in methods if m not in quantizer.METHODS]
        if unknown:
            raise typer.BadParameter(f"--method {unknown[0]!r}: one of {', '.join(quantizer.METHODS)}")
        settings = common.settings(out.config_file)
        plan = plan_for(settings, model)
        try:
            calibration = benchsets.ensure(_benchset_config(settings, plan, data), plan.benchsets_dir)
            bench = benchsets.ensure(_benchset_config(settings, plan, benchset), plan.benchsets_dir)
            found = calibrate.calibrate(
                plan.model.path,
                list(calibration.iter_samples()),
                list(bench.iter_samples()),
                decisions=plan.model.decisions,
                methods=methods or quantizer.METHODS,
                keep=keep,
            )
        except MonitorError as exc:
            if exc.exit_code != 1:
                raise
            _crashed(exc)
        except Exception as exc:
            _crashed(exc)

        def table(wide: bool) -> list[common.PlainTable | str]:
            shown = common.PlainTable(
                "method",
                "SQNR dB",
                "worst layer dB",
                "flipped",
                "decisions",
                "size",
                "error",
                title=f"calibration methods: calibrated on {calibration.name}, measured on {bench.name}",
            )
            for m in found.methods:
                worst = m.worst_layer
                shown.add_row(
                    m.method,
                    common.fmt(m.sqnr_db),
                    common.fmt(worst.sqnr_db if worst else None),
                    common.fmt(m.decisions_flipped),
                    common.fmt(m.decisions_total),
                    common.fmt(m.size_bytes, "d"),
                    m.error or "",
                )
            choice = f"recommended: {found.recommended}" if found.recommended else "no method could be measured"
            return [shown, f"{choice} (rule: {calibrate.RULE})"]

        out.emit(
            lambda: {**found.to_dict(), "calibration_set": calibration.name, "benchset": bench.name},
            table,
        )
        if found.recommended is None:
            typer.echo("onnxmon: no calibration method could be measured", err=True)
            raise typer.Exit(CRASHED)


def _benchset_config(settings: Settings, plan: CheckPlan, name: str | None) -> BenchsetConfig:
    if name is None:
        return plan.benchset
    declared = {b.name: b for b in settings.benchsets}
    if name not in declared:
        raise ConfigError(f"--benchset {name!r} is not declared; declared: {', '.join(sorted(declared)) or 'none'}")
    return declared[name]


def _crashed(exc: BaseException) -> None:
    typer.echo(f"onnxmon: could not measure: {type(exc).__name__}: {exc}", err=True)
    sys.stderr.flush()
    raise typer.Exit(CRASHED)
