"""``onnxmon serve``: the long-running daemon (scheduler + HTTP API + metrics)."""

from __future__ import annotations

import logging
import sys

import typer

from monitor.cli import common


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        config_file: str | None = common.ConfigOption,
        host: str | None = typer.Option(None, "--host", help="Override api.host."),
        port: int | None = typer.Option(None, "--port", min=1, max=65535, help="Override api.port."),
        log_level: str = typer.Option("info", "--log-level", help="debug | info | warning | error"),
    ) -> None:
        """Run checks on their schedules and serve /metrics, /healthz, /readyz and the API."""
        logging.basicConfig(
            level=getattr(logging, log_level.upper(), logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s %(message)s",
            stream=sys.stderr,
        )
        settings = common.settings(config_file)
        if host or port:
            api = settings.api.model_copy(update={k: v for k, v in (("host", host), ("port", port)) if v})
            settings = settings.model_copy(update={"api": api})
        store = common.open_store(settings)
        from monitor.daemon.root import Daemon

        raise typer.Exit(Daemon(settings, store=store).serve())
