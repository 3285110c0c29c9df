"""``onnxmon localize MODEL`` and ``onnxmon sqnr MODEL``: where in the model the numbers moved.

``localize`` names two of the model's nodes: the first whose output *changed* while its inputs
did not, and the first *out of tolerance* (the check's own tolerance, or ``--threshold-rule
std``). ``--against self`` compares ``--runs`` identical runs instead: the first node whose output
differs between them (where nondeterminism enters) and each node's run-to-run spread. Exit codes:
0 no node out of tolerance, 1 a node is, 2 a usage or config mistake, 3 localization itself failed
(a crash is never reported as "a node diverged"). Localization runs in an isolated child
(``daemon/localization.py``): an ONNX Runtime crash there is exit 3 naming the signal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from monitor import bounded
from monitor.cli import common, output
from monitor.config.plan import plan_for
from monitor.config.settings import parse_duration
from monitor.errors import MonitorError
from monitor.localize.request import LocalizeRequest, RequestError

CRASHED = 3
KEYWORDS = ("auto", "baseline", "unoptimized", "reference", "self")
# A request field -> the flag that sets it, where the two are not spelled alike.
FLAGS = {"reference_model": "reference", "rel_threshold": "threshold", "time_budget_s": "budget"}


def register(app: typer.Typer) -> None:
    @app.command("localize")
    @output.options()
    def localize_cmd(
        model: str = typer.Argument(..., help="Model name from the config."),
        sample: int = typer.Option(0, "--sample", min=0, help="Benchmark sample to replay."),
        against: str = typer.Option(
            "auto",
            "--against",
            help="auto | baseline | unoptimized | model (with --reference PATH) | model:PATH | PATH of a reference"
            " model (e.g. the fp32 build) | self (identical runs: the first nondeterministic node).",
        ),
        runs: int = typer.Option(3, "--runs", min=2, max=100, help="With --against self: identical runs compared."),
        reference_path: Path | None = typer.Option(
            None, "--reference", help="With --against model: the reference model file (e.g. the fp32 build)."
        ),
        mode: str = typer.Option("auto", "--mode", help="auto | all | bisect"),
        graph_level: str | None = typer.Option(
            None,
            "--graph-level",
            help="ORT optimization level of the exposed graph: disable|basic|extended|layout|all.",
        ),
        graph_view: str = typer.Option(
            "auto",
            "--graph-view",
            help="auto | model (expose the model's tensors) | optimized (expose ORT's optimized graph, mapped back).",
        ),
        threshold_rule: str = typer.Option(
            "tolerance", "--threshold-rule", help="tolerance (the check's atol/rtol, per tensor) | std (1% of std)."
        ),
        chunk_size: int = typer.Option(64, "--chunk-size", min=1, help="Tensors exposed per run (bounds memory)."),
        threshold: float = typer.Option(0.01, "--threshold", help="With --threshold-rule std: fraction of the std."),
        budget: str | None = typer.Option(None, "--budget", help="Time budget, e.g. 60s; partial report after it."),
        svg: Path | None = typer.Option(None, "--svg", help="Write the per-node error plot (SVG) here."),
        model_explorer: Path | None = typer.Option(
            None,
            "--model-explorer",
            help="Write Google Model Explorer node data (per-node relative error; a .max_abs.json sibling) here.",
        ),
        quiet: bool = common.QuietOption,
        *,
        out: output.Output,
    ) -> None:
        """Re-run one input with the model's tensors exposed: first node that changed, first out of tolerance."""
        from monitor.daemon import localization
        from monitor.localize import engine

        reference = reference_model(against, reference_path)
        request = localize_request(
            sample=sample,
            against="model" if reference is not None else against,
            reference_model=reference,
            mode=mode,
            graph_level=graph_level,
            graph_view=graph_view,
            threshold_rule=threshold_rule,
            chunk_size=chunk_size,
            rel_threshold=threshold,
            time_budget_s=parse_duration(budget) if budget else None,
            runs=runs,
        )
        settings = common.settings(out.config_file)
        plan = plan_for(settings, model)
        console = common.console()
        try:
            with (
                console.status(f"localizing {model} …", spinner="dots") if not (quiet or out.structured) else _nothing()
            ):
                # In an isolated child, like every check: an ORT crash there is exit 3 with a message.
                report = localization.localize_isolated(plan, request, memory_limit_mb=settings.daemon.memory_limit_mb)
        except MonitorError as exc:
            if exc.exit_code != 1:
                raise
            _crashed(exc)
        except Exception as exc:  # a crash of localization is exit 3, never 1 ("a node diverged")
            _crashed(exc)
        if svg is not None:
            svg.write_text(engine.plot_svg(report), encoding="utf-8")
        if model_explorer is not None:
            from monitor.localize import explorer

            path = plan.model.path
            explorer.write(report, explorer.graph_name(path), model_explorer, explorer.model_ids(path))

        def text(wide: bool) -> list[common.PlainTable | str]:
            details = (report.comparison_detail, report.rule_detail, report.graph_level_detail, *report.notes)
            table = common.PlainTable(
                "#",
                "node",
                "op",
                "rel error",
                "max abs",
                "changed",
                "out of tol",
                "inputs changed",
                title="top nodes by error",
            )
            for node in report.top:
                table.add_row(
                    str(node.index),
                    node.name,
                    node.op_type,
                    common.fmt(node.rel_error),
                    common.fmt(node.max_abs_error),
                    _yes(node.changed),
                    _yes(node.out_of_tolerance),
                    _yes(node.inputs_changed),
                )
            return [report.summary(), *(f"  {line}" for line in details), table]

        out.emit(report.to_dict, text, quiet=quiet)
        raise typer.Exit(0 if report.first_out_of_tolerance is None else 1)

    @app.command("sqnr")
    @output.options()
    def sqnr_cmd(
        model: str = typer.Argument(..., help="Model name from the config (the quantized QDQ model)."),
        float_model: Path = typer.Option(..., "--float", help="The float model it was quantized from."),
        sample: int = typer.Option(0, "--sample", min=0, help="Benchmark sample to replay."),
        *,
        out: output.Output,
    ) -> None:
        """Per-layer SQNR (dB) of a QDQ model against its float model, paired by DequantizeLinear outputs."""
        from monitor.files import benchsets
        from monitor.localize import sqnr

        if problem := bounded.not_regular(float_model):
            raise typer.BadParameter(f"--float {float_model} {problem} (expected the float ONNX model)")
        plan = plan_for(common.settings(out.config_file), model)
        try:
            feeds = benchsets.ensure(plan.benchset, plan.benchsets_dir).load_sample(sample)
            layers = sqnr.per_layer_sqnr(float_model, plan.model.path, feeds)
        except MonitorError as exc:
            if exc.exit_code != 1:
                raise
            _crashed(exc)
        except Exception as exc:
            _crashed(exc)

        def table(wide: bool) -> common.PlainTable:
            shown = common.PlainTable("#", "node", "op", "tensor", "paired with", "SQNR dB", title="per-layer SQNR")
            for layer in layers:
                shown.add_row(
                    str(layer.index),
                    layer.node,
                    layer.op_type,
                    layer.tensor,
                    layer.quantized_tensor,
                    common.fmt(layer.sqnr_db),
                )
            return shown

        out.emit(lambda: {"model": model, "float": str(float_model), "layers": [x.to_dict() for x in layers]}, table)


def localize_request(**options: Any) -> LocalizeRequest:
    """The command's options as a ``LocalizeRequest``; a value it refuses is a usage error naming the flag."""
    try:
        return LocalizeRequest(**options)
    except RequestError as exc:
        flag = FLAGS.get(exc.field, exc.field.replace("_", "-"))
        raise typer.BadParameter(f"--{flag}: {exc}") from None


def reference_model(against: str, reference: Path | None) -> Path | None:
    """The reference model file that ``--against`` / ``--reference`` name, or None for another side.

    Spellings: ``--against model --reference PATH``, ``--against model:PATH``, ``--against PATH`` (kept
    from before), or ``--reference PATH`` alone (``--against`` left at ``auto``).
    """
    path: Path | None
    if against == "model":
        if reference is None:
            raise typer.BadParameter("--against model needs the reference file: --reference PATH (or model:PATH)")
        path = reference
    elif against in KEYWORDS:
        if reference is not None and against != "auto":
            raise typer.BadParameter(f"--reference goes with --against model, not with --against {against}")
        path = reference
    else:
        if reference is not None:
            raise typer.BadParameter(f"--against {against!r} already names a reference file; drop --reference")
        if not against.removeprefix("model:").strip():
            raise typer.BadParameter("--against model: needs a path after the colon (model:PATH)")
        path = Path(against.removeprefix("model:"))
    if path is not None and (problem := bounded.not_regular(path)):
        what = "--reference" if reference is not None else "--against"
        problem = "no such model file" if problem == "not found" else problem
        raise typer.BadParameter(
            f"{what} {str(path)!r}: {problem} (--against takes auto|baseline|unoptimized|model|PATH)"
        )
    return path


def _crashed(exc: BaseException) -> None:
    typer.echo(f"onnxmon: localization failed: {type(exc).__name__}: {exc}", err=True)
    sys.stderr.flush()
    raise typer.Exit(CRASHED)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
