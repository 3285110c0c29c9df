"""``onnxmon serve``: the long-running daemon (scheduler + HTTP API + metrics)."""

from __future__ import annotations

import typer

from monitor.cli import common, logs


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        config_file: str | None = common.ConfigOption,
        host: str | None = typer.Option(None, "--host", help="Override api.host."),
        port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Override api.port."),
        log_level: str | None = logs.LevelOption,
        log_format: str | None = logs.FormatOption,
        access_log: bool | None = typer.Option(
            None, "--access-log/--no-access-log", help="Log every HTTP request (default: api.access_log, off)."
        ),
    ) -> None:
        """Run checks on their schedules and serve /metrics, /healthz, /readyz and the API."""
        logs.check_flags(log_level, log_format)
        settings = common.settings(config_file)
        logs.configure_from(settings.logging, log_level, log_format)
        changes = {k: v for k, v in (("host", host), ("port", port), ("access_log", access_log)) if v is not None}
        if changes:
            settings = settings.model_copy(update={"api": settings.api.model_copy(update=changes)})
        store = common.open_store(settings)
        from monitor.daemon.root import Daemon

        raise typer.Exit(Daemon(settings, store=store).serve())
