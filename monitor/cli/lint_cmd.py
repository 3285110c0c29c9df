"""``onnxmon lint MODEL``: export hazards in an ONNX graph, each naming its node, without running it.

MODEL is a model file, or the name of a configured model: then its benchmark set (the newest
materialized version, read from its manifest; made first, as a check would, when the config names a
set not materialized yet) tells which input dims the set varies, and its
``checks.batch_invariance`` adds the batch it will feed. The installed ONNX Runtime is probed for
the newest opset and IR version it loads.

Exit codes, as linters do it: 0 no hazard of severity ``error`` (warnings and info are printed,
not failed), 1 at least one ``error``, 2 a usage mistake (no such file or model, not an ONNX file).
"""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.cli import common, output
from monitor.errors import ConfigError, MonitorError


def register(app: typer.Typer) -> None:
    @app.command("lint")
    def lint_cmd(
        model: str = typer.Argument(..., help="A model file (.onnx), or a model name from the config."),
        config_file: str | None = common.ConfigOption,
        benchset: str | None = typer.Option(
            None, "--benchset", help="Benchmark set whose input shapes the model must accept (default: the model's)."
        ),
        as_json: bool = common.JsonOption,
        fmt: str | None = common.OutputOption,
        quiet: bool = common.QuietOption,
    ) -> None:
        """Find export hazards (training mode, Resize modes, baked batch, fp16, QDQ, opset); exit 1 on an error."""
        from monitor import lint
        from monitor.runtime import support

        path, varied = _target(model, config_file, benchset)
        report = lint.lint_model(path, support=support.probe(), varied=varied)
        chosen = output.chosen(fmt, as_json)
        if output.structured(chosen):
            output.print_data(report.to_dict(), chosen)
        elif not quiet:
            typer.echo(report.render())
        raise typer.Exit(0 if report else 1)


def _target(model: str, config_file: str | None, benchset: str | None) -> tuple[Path, dict[str, dict[int, set[int]]]]:
    """The file to lint and the dims its benchmark set varies (empty without a set)."""
    from monitor import exportcheck
    from monitor.files import benchsets

    given = Path(model)
    if given.suffix == ".onnx" or given.exists():
        if benchset is None:
            return given, {}
        settings = common.settings(config_file)
        return given, exportcheck.varied_dims(benchsets.open_benchset(settings.store.benchsets_dir, benchset))
    try:
        settings = common.settings(config_file)
    except ConfigError as exc:
        raise MonitorError(f"{model!r} is not a model file, and no config names it: {exc}") from None
    configured = settings.model(model)
    name = benchset or configured.benchset
    try:
        bench = benchsets.open_benchset(settings.store.benchsets_dir, name)
    except MonitorError:
        bench = None  # not materialized yet: the config names it, so make it as a check's first use does
    if bench is None:
        try:
            bench = benchsets.ensure(settings.benchset(name), settings.store.benchsets_dir)
        except MonitorError:
            bench = None  # a set that cannot be made (a missing source file): lint what the file alone tells
    varied = exportcheck.varied_dims(bench) if bench is not None else {}
    return configured.path, exportcheck.with_batch(varied, configured, bench)
