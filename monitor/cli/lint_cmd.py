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
    @output.options()
    def lint_cmd(
        model: str = typer.Argument(..., help="A model file (.onnx), or a model name from the config."),
        benchset: str | None = typer.Option(
            None, "--benchset", help="Benchmark set whose input shapes the model must accept (default: the model's)."
        ),
        activations: bool = typer.Option(
            False,
            "--activations",
            help="A configured model only: run its benchmark set's first samples with every tensor exposed and"
            " flag float32 activations past 512 (AutoCast's data_max) before an fp16 build. Runs the model.",
        ),
        quiet: bool = common.QuietOption,
        *,
        out: output.Output,
    ) -> None:
        """Find export hazards (training mode, Resize modes, baked batch, fp16, QDQ, opset); exit 1 on an error."""
        from monitor import lint
        from monitor.runtime import support

        path, varied = _target(model, out.config_file, benchset)
        maxima = _activation_maxima(model, out.config_file, benchset) if activations else None
        report = lint.lint_model(path, support=support.probe(), varied=varied, activations=maxima)
        out.emit(report.to_dict, lambda wide: report.render(), quiet=quiet)
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


SAMPLES_FOR_RANGES = 2


def _activation_maxima(model: str, config_file: str | None, benchset: str | None) -> dict[str, float]:
    """The largest |x| of every float32 tensor over the first samples, on the model's own providers and session.

    Lint itself never runs a model; this is the caller measuring what AutoCast measures on its
    calibration data (``--data_max``). A model file (not a configured model) has no benchmark set here.
    """
    import numpy as np

    from monitor.files import benchsets
    from monitor.files.benchset_generate import EDGE_CASES
    from monitor.localize import engine

    try:
        settings = common.settings(config_file)
        configured = settings.model(model)
    except MonitorError as exc:
        raise MonitorError(f"--activations needs a model named in the config: {exc}") from None
    bench = benchsets.ensure(settings.benchset(benchset or configured.benchset), settings.store.benchsets_dir)
    # calibration-like samples only: the edge cases (zeros, range extremes, ±7e4) are extreme on purpose
    labels = bench.labels or ("",) * len(bench)
    chosen = [i for i, label in enumerate(labels) if label not in EDGE_CASES][:SAMPLES_FOR_RANGES]
    # the model's own tensors, unfused (AutoCast reasons about the graph it converts, not ORT's fusions)
    plain = configured.session.model_copy(update={"graph_optimization_level": "disable"})
    maxima: dict[str, float] = {}
    for index in chosen:
        tensors = engine.capture_intermediates(
            configured.path, bench.load_sample(index), providers=configured.providers, session=plain, graph_view="model"
        )
        for name, value in tensors.items():
            array = np.asarray(value)
            if array.dtype == np.float32 and array.size:
                finite = np.abs(array[np.isfinite(array)])
                if finite.size:
                    maxima[name] = max(maxima.get(name, 0.0), float(finite.max()))
    return maxima
