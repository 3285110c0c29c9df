"""``onnxmon incident note|list|show``: what people found a failure to be, kept for the next one.

``note RUN_ID --cause CODE --text ... [--fix ...]`` stores the incident with the run's signature
(changed environment fields, localized op type, failing outputs, reasons), so a later failure
with the same signature is offered it ("similar to incident 12 on 2026-11-03: conv_algorithm,
fixed by cudnn_conv_algo_search=DEFAULT") by ``check``, ``diagnose``, the API and the run page.
"""

from __future__ import annotations

import typer

from monitor.cli import common, output, terminal
from monitor.errors import MonitorError
from monitor.results import CAUSE_CODES


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Incidents noted by people: note one on a run, list them, show one.", no_args_is_help=True)
    app.add_typer(group, name="incident")

    @group.command("note")
    @output.options()
    def note(
        run_id: int = typer.Argument(
            ..., min=1, max=common.MAX_ID, help="The run it is about (the run column of onnxmon history)."
        ),
        cause: str = typer.Option(..., "--cause", help=f"A cause code: {', '.join(sorted(CAUSE_CODES))}."),
        text: str = typer.Option(..., "--text", help="What was found."),
        fix: str | None = typer.Option(None, "--fix", help="What fixed it (e.g. cudnn_conv_algo_search=DEFAULT)."),
        by: str | None = typer.Option(None, "--by", help="Who notes it (default: the login name)."),
        *,
        out: output.Output,
    ) -> None:
        """Note an incident on a run: its cause, what was found and the fix, matched to later failures."""
        from monitor.store import incidents

        settings = common.settings(out.config_file)
        with common.open_store(settings) as store:
            signature = incidents.signature_of(store, run_id)
            if signature is None:
                raise MonitorError(f"no run {run_id} in the history")
            record = incidents.record_incident(
                store,
                run_id,
                cause=cause,
                text=text,
                fix=fix,
                by=by or common.login() or "unknown",
                signature=signature,
            )
        out.emit(
            record.to_dict, lambda wide: f"incident {record.id} noted on run {run_id} of {record.model}: {record.cause}"
        )

    @group.command("list")
    @output.options()
    def list_(
        model: str | None = typer.Option(None, "--model", help="Only this model's incidents."),
        limit: int = typer.Option(100, "--limit", min=1, max=10000, help="Newest first, at most this many."),
        *,
        out: output.Output,
    ) -> None:
        """Incidents, newest first."""
        from monitor.store import incidents

        settings = common.settings(out.config_file)
        with common.open_store(settings) as store:
            records = incidents.incidents(store, limit=limit, model=model)

        def table(wide: bool) -> common.PlainTable:
            # Whole texts with -o wide and when piped (a script or a grep must see all of it); on a
            # terminal's plain table, the first 80 characters with an ellipsis.
            cut = None if wide or not output.is_terminal() else 80
            shown = common.PlainTable(pad_edge=False)
            for column in ("id", "at", "model", "run", "cause", "fix", "text"):
                shown.add_column(column, overflow="fold", no_wrap=column in ("id", "at", "run", "cause"))
            for r in records:
                at = r.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
                text = r.text if cut is None or len(r.text) <= cut else r.text[: cut - 1] + "…"
                shown.add_row(str(r.id), at, r.model, str(r.run_id or "-"), r.cause, r.fix or "-", text)
            return shown

        out.emit(lambda: [r.to_dict() for r in records], table)

    @group.command("show")
    @output.options()
    def show(
        incident_id: int = typer.Argument(..., min=1, max=common.MAX_ID, help="The incident id."),
        *,
        out: output.Output,
    ) -> None:
        """One incident with the signature it is matched by."""
        from monitor.store import incidents

        settings = common.settings(out.config_file)
        with common.open_store(settings) as store:
            record = incidents.incident(store, incident_id)
        if record is None:
            raise MonitorError(f"no incident {incident_id}")
        data = record.to_dict()

        def text(wide: bool) -> list[str]:
            # a person's text: escapes shown, not obeyed
            lines = [
                terminal.safe(f"{key}: {data[key]}")
                for key in ("id", "at", "model", "run_id", "created_by", "cause", "fix", "text")
            ]
            return lines + [
                f"signature.{part}: {', '.join(values) or '-'}" for part, values in data["signature"].items()
            ]

        out.emit(lambda: data, text)
