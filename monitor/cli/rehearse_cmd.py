"""``onnxmon rehearse [MODELS] --python PATH``: go/no-go for an upgrade, before it ships.

Every model's benchmark set is replayed on a candidate stack (another interpreter with onnxmon and the
candidate ONNX Runtime: ``scripts/ort-venv VERSION`` makes one) against production's active baselines,
in the same isolated child as a check. Exit codes: 0 every model is go, 1 any is no-go, 3 the candidate
cannot run (nothing measured), 2 usage.
"""

from __future__ import annotations

import typer

from monitor.cli import common, output
from monitor.errors import MonitorError


def register(app: typer.Typer) -> None:
    @app.command("rehearse")
    @output.options()
    def rehearse_cmd(
        models: list[str] = typer.Argument(None, help="Models to rehearse (default: all in the config)."),
        python: str = typer.Option(
            ..., "--python", help="The candidate interpreter: onnxmon and the candidate onnxruntime installed."
        ),
        store: bool = typer.Option(True, "--store/--no-store", help="Record the results as candidate runs."),
        *,
        out: output.Output,
    ) -> None:
        """Replay every model on a candidate stack and say, per model, go or no-go, and why."""
        from monitor.rehearse import candidate
        from monitor.rehearse.rehearsal import rehearse

        settings = common.settings(out.config_file)
        if settings.source is None:
            raise MonitorError("rehearse needs a config file (-c FILE): the candidate reads the same one")
        names = models or [m.name for m in settings.models]
        if not names:
            raise MonitorError(f"{settings.source}: no models configured")
        for name in names:
            settings.model(name)  # an unknown name says which names exist, before anything runs
        stack = candidate.probe(python)
        opened = common.open_store(settings) if store else None
        try:
            node, _ = common.node_identity()
            report, unstored = rehearse(settings, str(settings.source), stack, names, opened, node=node)
        finally:
            if opened is not None:
                opened.close()
        out.emit(report.to_dict, lambda wide: report.text())
        if store and unstored:
            typer.echo(f"onnxmon: warning: {unstored} candidate run(s) not recorded in the store", err=True)
        raise typer.Exit(report.exit_code())
