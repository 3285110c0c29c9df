"""``onnxmon config validate|show``: check a config file before the daemon ever sees it."""

from __future__ import annotations

import typer

from monitor import jsonsafe
from monitor.config import settings as config

ConfigOption = typer.Option(None, "-c", "--config", help="Config file (default: $ONNXMON_CONFIG or ./onnxmon.yaml).")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Validate and show the configuration.", no_args_is_help=True)

    @group.command("validate")
    def validate(config_file: str | None = ConfigOption) -> None:
        """Validate the config; print every problem with its path and exit 2 if any."""
        settings = config.load(config_file)
        typer.echo(f"{settings.source}: ok ({len(settings.models)} model(s), {len(settings.benchsets)} benchset(s))")

    @group.command("show")
    def show(config_file: str | None = ConfigOption) -> None:
        """Print the effective config (file + ONNXMON_* overrides, paths resolved) as JSON, secrets masked."""
        settings = config.load(config_file)
        typer.echo(jsonsafe.dumps(settings.redacted(), indent=2))

    @group.command("reference")
    def reference() -> None:
        """Print the configuration reference (Markdown) generated from the schema."""
        from monitor.config import doc

        typer.echo(doc.render(), nl=False)

    app.add_typer(group, name="config")
