"""``onnxmon diff-model OLD NEW``: what changed between two ONNX model files, without running them.

Exit codes follow the house rule that 1 means drift: a model that changed *is* the drift this
command looks for, so it exits 0 when the two models are the same, 1 when they differ, and 2 when
a file is missing or is not an ONNX model (one line on stderr naming the file).
"""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.cli import common


def register(app: typer.Typer) -> None:
    @app.command("diff-model")
    def diff_model_cmd(
        old: Path = typer.Argument(..., help="The earlier model file (.onnx; its external data next to it)."),
        new: Path = typer.Argument(..., help="The later model file."),
        top: int = typer.Option(10, "--top", min=0, help="Changes listed per kind in the text form."),
        limit: int = typer.Option(200, "--limit", min=1, help="Entries per list in --json (the rest are counted)."),
        as_json: bool = common.JsonOption,
        quiet: bool = common.QuietOption,
    ) -> None:
        """Diff two ONNX models statically: weights, nodes, types, opsets; exit 1 when they differ."""
        from monitor import modeldiff

        diff = modeldiff.diff_models(old, new)
        if as_json:
            common.print_json(diff.to_dict(limit=limit))
        elif not quiet:
            typer.echo(diff.render(top=top))
        raise typer.Exit(1 if diff else 0)
