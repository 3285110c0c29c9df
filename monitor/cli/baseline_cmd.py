"""``onnxmon baseline capture|import|list|show|promote|history``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from monitor import capture, jsonsafe
from monitor.cli import common, output
from monitor.config import crosscheck
from monitor.config.plan import plan_for
from monitor.config.settings import Settings, parse_duration
from monitor.daemon import child
from monitor.errors import MonitorError
from monitor.files import baseline_undo, baselines, signature

if TYPE_CHECKING:
    from monitor.store import Store


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Capture, import, list, inspect and promote baselines.", no_args_is_help=True)

    @group.command("capture")
    @output.options()
    def capture_cmd(
        model: str = ModelArgument,
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
        *,
        out: output.Output,
    ) -> None:
        """Run the benchmark set on this stack and store the outputs as a new baseline."""
        settings = common.settings(out.config_file)
        plan = plan_for(settings, model)  # an unknown name fails before the progress bar shows
        crosscheck.refuse_unknown_outputs(settings, [model], signature.output_names, signature.output_types)
        store = common.open_store(settings)  # an un-migrated store stops here, before a baseline is written
        limit = _duration("--timeout", timeout) if timeout else 3 * plan.timeout_s
        options = {
            "reference": reference,
            "promote": promote,
            "promoted_by": common.login(),
            "intermediate_samples": samples if intermediates else 0,
            "note": note,
        }
        before = baseline_undo.active_state(settings.store.baselines_dir, model)
        with _progress(quiet or not output.is_terminal()) as bar:
            bar.add_task(f"capturing {model} (at most {limit:g} s)", total=None)
            # In an isolated child with a hard limit, like every check: a hung model cannot hang the CLI.
            baseline = child.capture_isolated(
                plan, options, timeout_s=limit, memory_limit_mb=settings.daemon.memory_limit_mb
            )
        with store:
            record_or_undo(settings, baseline, before, store=store)
        if not quiet:
            _print_baseline(out, settings, baseline, "captured")

    @group.command("import")
    @output.options()
    def import_cmd(
        model: str = ModelArgument,
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
        promote: bool = typer.Option(False, "--promote", help="Make it the active baseline."),
        note: str = typer.Option("", "--note", help="Free text kept with the baseline."),
        *,
        out: output.Output,
    ) -> None:
        """Store reference outputs produced elsewhere (e.g. PyTorch) as a baseline (source 'imported')."""
        if kind not in ("npz", "onnx-test-data", "polygraphy-json"):
            raise typer.BadParameter(f"--kind must be npz, onnx-test-data or polygraphy-json, got {kind!r}")
        settings = common.settings(out.config_file)
        common.refuse_unready_store(settings)  # before anything is written to the baselines directory
        before = baseline_undo.active_state(settings.store.baselines_dir, model)
        baseline = capture.import_baseline(
            plan_for(settings, model),
            files,
            kind=kind,  # type: ignore[arg-type]
            intermediates=list(intermediates or []),
            promote=promote,
            promoted_by=common.login(),
            note=note,
        )
        record_or_undo(settings, baseline, before)
        _print_baseline(out, settings, baseline, "imported")

    @group.command("list")
    @output.options()
    def list_cmd(
        model: str = ModelArgument,
        *,
        out: output.Output,
    ) -> None:
        """Every baseline of MODEL, oldest first; the active one is marked."""
        settings = common.settings(out.config_file)
        root = settings.store.baselines_dir
        active = baselines.active_id(root, model)
        items = baselines.list_baselines(root, model)

        def table(wide: bool) -> common.PlainTable:
            cut = 64 if wide else 16
            shown = common.PlainTable("", "id", "created", "source", "samples", "model sha256", "environment")
            for b in items:
                fp = b.meta.environment_fingerprint or "-"
                shown.add_row(
                    "*" if b.id == active else "",
                    b.id,
                    b.meta.created_at,
                    b.meta.source,
                    str(b.meta.sample_count),
                    b.meta.model_sha256[:cut],
                    fp[:cut],
                )
            return shown

        out.emit(lambda: [_listed(b.meta.to_dict(), b.id == active) for b in items], table)

    @group.command("show")
    @output.options()
    def show_cmd(
        baseline_id: str = BaselineIdArgument,
        *,
        out: output.Output,
    ) -> None:
        """Print one baseline's metadata (JSON, or YAML with -o yaml) and verify its tensors."""
        settings = common.settings(out.config_file)
        baseline = baselines.get(settings.store.baselines_dir, baseline_id)
        problems = baseline.verify()
        data = baseline.meta.to_dict() | {"directory": str(baseline.directory), "problems": problems}
        out.emit(lambda: data)  # data only: a table would be the same JSON
        raise typer.Exit(1 if problems else 0)

    @group.command("promote")
    @output.options()
    def promote_cmd(
        baseline_id: str = BaselineIdArgument,
        note: str = typer.Option("", "--note", help="Why: kept with the promotion, shown by history and the pages."),
        by: str | None = typer.Option(None, "--by", help="Who promotes (default: your login name)."),
        *,
        out: output.Output,
    ) -> None:
        """Make BASELINE_ID the active baseline of its model, recording when, by whom and why."""
        settings = common.settings(out.config_file)
        who = by or promoter()
        with common.open_store(settings) as store:  # an un-migrated store stops here, before ACTIVE changes
            root = settings.store.baselines_dir
            before = baseline_undo.active_state(root, baselines.get(root, baseline_id).meta.model)
            baseline = baselines.promote(root, baseline_id, by=who, note=note)
            try:
                _record(settings, baseline, store=store)
                store.record_promotion(baseline.meta.model, baseline.id, by=who, note=note)
            except BaseException:  # the store failed after ACTIVE changed: put it back, as it was
                baseline_undo.restore(before)
                raise
        out.emit(
            lambda: {"model": baseline.meta.model, "active": baseline.id, "directory": str(baseline.directory)},
            lambda wide: f"{baseline.meta.model}: active baseline is now {baseline.id}",
        )

    @group.command("history")
    @output.options()
    def history_cmd(
        model: str = ModelArgument,
        *,
        out: output.Output,
    ) -> None:
        """Every baseline of MODEL on disk and in the store: when active, on which environment, where recorded."""
        from monitor.cli import baseline_history

        entries = baseline_history.collect(common.settings(out.config_file), model)
        out.emit(lambda: [e.to_dict() for e in entries], lambda wide: baseline_history.table(entries, wide))

    app.add_typer(group, name="baseline")


ModelArgument = typer.Argument(..., help="Model name from the config.")
BaselineIdArgument = typer.Argument(..., help="Baseline id, as `onnxmon baseline list` prints it.")


def _listed(meta: dict[str, object], active: bool) -> dict[str, object]:
    """A baseline's metadata for ``-o json``: ``created_at`` in RFC 3339 UTC whatever version wrote it."""
    return meta | {"created_at": jsonsafe.normalized(str(meta.get("created_at", ""))), "active": active}


def _print_baseline(out: output.Output, settings: Settings, baseline: baselines.Baseline, verb: str) -> None:
    """The new baseline's id (and where it lives), as a sentence or as data for scripts."""
    active = baselines.active_id(settings.store.baselines_dir, baseline.meta.model) == baseline.id
    data = {
        "id": baseline.id,
        "model": baseline.meta.model,
        "samples": baseline.meta.sample_count,
        "active": active,
        "directory": str(baseline.directory),
    }
    state = "active" if active else "inactive"
    sentence = f"{verb} {baseline.id} ({baseline.meta.sample_count} samples, {state}) in {baseline.directory}"
    out.emit(lambda: data, lambda wide: sentence)


def _record(settings: Settings, baseline: baselines.Baseline, store: Store | None = None) -> None:
    """Mirror the baseline into the store so history and the API can see it.

    An active one carries its promotion as the log on disk has it (when, by whom, why), so history
    dates the promotion when it happened rather than when the baseline was captured.
    """
    db = store or common.open_store(settings)
    meta = baseline.meta
    root = settings.store.baselines_dir
    active = baselines.active_id(root, meta.model) == meta.id
    record = meta.store_record(path=baseline.directory, active=active)
    promotion = baselines.last_promotion(root, meta.model, meta.id) if active else None
    if promotion is not None:
        record |= {
            "promoted_at": promotion.get("at"),
            "promoted_by": promotion.get("by"),
            "promotion_note": promotion.get("note", ""),
        }
    db.record_baseline(record)


def record_or_undo(
    settings: Settings, baseline: baselines.Baseline, before: baseline_undo.ActiveState, store: Store | None = None
) -> None:
    """``_record`` the new baseline, or remove it and put ACTIVE back as ``before`` when the store fails.

    The readiness check ran before the capture; a store that goes down in between must not leave an
    ACTIVE baseline on disk that the store never recorded (nothing written by a command that fails).
    """
    try:
        _record(settings, baseline, store=store)
    except BaseException:
        baseline_undo.restore(before, drop=baseline.directory)
        raise


def promoter() -> str:
    """Who promotes from this shell: the login name (``$USER``), as the store and history show it."""
    return f"{common.login()} (cli)" if common.login() else "cli"


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
