"""``onnxmon localize MODEL``: name the first ONNX node whose output moved, and how the error grew."""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.cli import common
from monitor.config.plan import plan_for
from monitor.config.settings import parse_duration


def register(app: typer.Typer) -> None:
    @app.command("localize")
    def localize_cmd(
        model: str = typer.Argument(..., help="Model name from the config."),
        config_file: str | None = common.ConfigOption,
        sample: int = typer.Option(0, "--sample", min=0, help="Benchmark sample to replay."),
        against: str = typer.Option("auto", "--against", help="auto | baseline | reference"),
        mode: str = typer.Option("auto", "--mode", help="auto | all | bisect"),
        chunk_size: int = typer.Option(64, "--chunk-size", min=1, help="Tensors exposed per run (bounds memory)."),
        threshold: float = typer.Option(0.01, "--threshold", help="Divergence: fraction of the reference std."),
        budget: str | None = typer.Option(None, "--budget", help="Time budget, e.g. 60s; partial report after it."),
        svg: Path | None = typer.Option(None, "--svg", help="Write the per-node error plot (SVG) here."),
        as_json: bool = common.JsonOption,
        quiet: bool = common.QuietOption,
    ) -> None:
        """Re-run one input with intermediate tensors exposed and name the first node that diverged."""
        from monitor.localize import configured
        from monitor.localize import engine as localize

        if against not in ("auto", "baseline", "reference"):
            raise typer.BadParameter(f"--against must be auto, baseline or reference, not {against!r}")
        if mode not in ("auto", "all", "bisect"):
            raise typer.BadParameter(f"--mode must be auto, all or bisect, not {mode!r}")
        plan = plan_for(common.settings(config_file), model)
        console = common.console()
        with console.status(f"localizing {model} …", spinner="dots") if not (quiet or as_json) else _nothing():
            report = configured.localize_model(
                plan,
                sample=sample,
                against=against,  # type: ignore[arg-type]
                mode=mode,  # type: ignore[arg-type]
                chunk_size=chunk_size,
                rel_threshold=threshold,
                time_budget_s=parse_duration(budget) if budget else None,
            )
        if svg is not None:
            svg.write_text(localize.plot_svg(report), encoding="utf-8")
        if as_json:
            common.print_json(report.to_dict())
        elif not quiet:
            console.print(report.summary(), markup=False)
            table = common.PlainTable(
                "#", "node", "op", "rel error", "max abs", "inputs moved", title="top nodes by error"
            )
            for node in report.top:
                table.add_row(
                    str(node.index), node.name, node.op_type, common.fmt(node.rel_error),
                    common.fmt(node.max_abs_error), "yes" if node.inputs_diverged else "no",
                )  # fmt: skip
            console.print(table)
        raise typer.Exit(0 if report.first is None else 1)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
