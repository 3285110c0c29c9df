"""``onnxmon baseline capture|import|list|show|promote|history``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from monitor import capture
from monitor.cli import common
from monitor.config.plan import plan_for
from monitor.config.settings import Settings, parse_duration
from monitor.daemon import child
from monitor.errors import MonitorError
from monitor.files import baselines

if TYPE_CHECKING:
    from monitor.store import Store


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Capture, import, list, inspect and promote baselines.", no_args_is_help=True)

    @group.command("capture")
    def capture_cmd(
        model: str = typer.Argument(..., help="Model name from the config."),
        config_file: str | None = common.ConfigOption,
        promote: bool = typer.Option(False, "--promote", help="Make it the active baseline."),
        reference: bool = typer.Option(
            False, "--reference", help="Run on the CPU provider with optimizations disabled (source 'reference')."
        ),
        intermediates: bool = typer.Option(
            False, "--intermediates", help="Also store intermediate tensors for localization."
        ),
        samples: int = typer.Option(1, "--samples", min=1, help="How many samples' intermediates to store."),
        note: str = typer.Option("", "--note", help="Free text kept with the baseline."),
        timeout: str | None = typer.Option(
            None, "--timeout", help="Hard limit, e.g. 30m (default: 3 x the model's check timeout)."
        ),
        quiet: bool = common.QuietOption,
    ) -> None:
        """Run the benchmark set on this stack and store the outputs as a new baseline."""
        settings = common.settings(config_file)
        plan = plan_for(settings, model)  # an unknown name fails before the progress bar shows
        limit = _duration("--timeout", timeout) if timeout else 3 * plan.timeout_s
        options = {
            "reference": reference,
            "promote": promote,
            "intermediate_samples": samples if intermediates else 0,
            "note": note,
        }
        with _progress(quiet) as bar:
            bar.add_task(f"capturing {model} (at most {limit:g} s)", total=None)
            # In an isolated child with a hard limit, like every check: a hung model cannot hang the CLI.
            baseline = child.capture_isolated(
                plan, options, timeout_s=limit, memory_limit_mb=settings.daemon.memory_limit_mb
            )
        _record(settings, baseline)
        if not quiet:
            state = "active" if baselines.active_id(settings.store.baselines_dir, model) == baseline.id else "inactive"
            typer.echo(
                f"captured {baseline.id} ({baseline.meta.sample_count} samples, {state}) in {baseline.directory}"
            )

    @group.command("import")
    def import_cmd(
        model: str = typer.Argument(...),
        files: list[Path] = typer.Argument(
            ..., help="One .npz per sample, one onnx test-data directory, or one polygraphy --save-outputs JSON."
        ),
        kind: str = typer.Option("npz", "--kind", help="npz | onnx-test-data | polygraphy-json"),
        intermediates: list[Path] = typer.Option(
            None,
            "--intermediates",
            help="Intermediate tensors (keys = the model's tensor names) for localization: an npz per sample"
            " from the first, or one polygraphy JSON; repeat the option per file.",
        ),
        config_file: str | None = common.ConfigOption,
        promote: bool = typer.Option(False, "--promote"),
        note: str = typer.Option("", "--note"),
    ) -> None:
        """Store reference outputs produced elsewhere (e.g. PyTorch) as a baseline (source 'imported')."""
        if kind not in ("npz", "onnx-test-data", "polygraphy-json"):
            raise typer.BadParameter(f"--kind must be npz, onnx-test-data or polygraphy-json, got {kind!r}")
        settings = common.settings(config_file)
        baseline = capture.import_baseline(
            plan_for(settings, model),
            files,
            kind=kind,  # type: ignore[arg-type]
            intermediates=list(intermediates or []),
            promote=promote,
            note=note,
        )
        _record(settings, baseline)
        typer.echo(f"imported {baseline.id} ({baseline.meta.sample_count} samples)")

    @group.command("list")
    def list_cmd(
        model: str = typer.Argument(...),
        config_file: str | None = common.ConfigOption,
        as_json: bool = common.JsonOption,
    ) -> None:
        """Every baseline of MODEL, oldest first; the active one is marked."""
        settings = common.settings(config_file)
        root = settings.store.baselines_dir
        active = baselines.active_id(root, model)
        items = baselines.list_baselines(root, model)
        if as_json:
            common.print_json([b.meta.to_dict() | {"active": b.id == active} for b in items])
            return
        table = common.PlainTable("", "id", "created", "source", "samples", "model sha256", "environment")
        for b in items:
            fp = b.meta.environment_fingerprint or "-"
            table.add_row(
                "*" if b.id == active else "", b.id, b.meta.created_at[:19], b.meta.source,
                str(b.meta.sample_count), b.meta.model_sha256[:12], fp[:12],
            )  # fmt: skip
        common.console().print(table)

    @group.command("show")
    def show_cmd(baseline_id: str = typer.Argument(...), config_file: str | None = common.ConfigOption) -> None:
        """Print one baseline's metadata (JSON) and verify its tensors."""
        settings = common.settings(config_file)
        baseline = baselines.get(settings.store.baselines_dir, baseline_id)
        problems = baseline.verify()
        common.print_json(baseline.meta.to_dict() | {"directory": str(baseline.directory), "problems": problems})
        raise typer.Exit(1 if problems else 0)

    @group.command("promote")
    def promote_cmd(baseline_id: str = typer.Argument(...), config_file: str | None = common.ConfigOption) -> None:
        """Make BASELINE_ID the active baseline of its model."""
        settings = common.settings(config_file)
        baseline = baselines.promote(settings.store.baselines_dir, baseline_id, by="cli")
        store = common.open_store(settings)
        _record(settings, baseline, store=store)
        store.record_promotion(baseline.meta.model, baseline.id, by="cli")
        typer.echo(f"{baseline.meta.model}: active baseline is now {baseline.id}")

    @group.command("history")
    def history_cmd(
        model: str = typer.Argument(...),
        config_file: str | None = common.ConfigOption,
        as_json: bool = common.JsonOption,
    ) -> None:
        """Every baseline of MODEL: when it was active, on which environment."""
        settings = common.settings(config_file)
        rows = common.open_store(settings).baseline_history(model)
        if as_json:
            common.print_json([dataclasses.asdict(r) for r in rows])
            return
        table = common.PlainTable("id", "source", "created", "active from", "active until", "environment")
        for r in rows:
            table.add_row(*(str(getattr(r, f, "") or "-") for f in (
                "baseline_id", "source", "created_at", "active_from", "active_until", "environment_fingerprint"
            )))  # fmt: skip
        common.console().print(table)

    app.add_typer(group, name="baseline")


def _record(settings: Settings, baseline: baselines.Baseline, store: Store | None = None) -> None:
    """Mirror the baseline into the store so history and the API can see it."""
    db = store or common.open_store(settings)
    meta = baseline.meta
    active = baselines.active_id(settings.store.baselines_dir, meta.model) == meta.id
    db.record_baseline(meta.store_record(path=baseline.directory, active=active))


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: object, **kwargs: object) -> TaskID:
        return TaskID(0)

    def update(self, *args: object, **kwargs: object) -> None:
        return None


def _duration(option: str, text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise MonitorError(f"{option}: {exc}") from None
    if seconds <= 0:
        raise MonitorError(f"{option}: must be longer than 0 s")
    return seconds


def _progress(quiet: bool) -> Progress | _Quiet:
    if quiet:
        return _Quiet()
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
    )
