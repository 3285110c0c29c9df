"""``onnxmon config validate|show|reference``: check a config file before the daemon ever sees it."""

from __future__ import annotations

import typer

from monitor.cli import common, output

ConfigOption = common.ConfigOption


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Validate and show the configuration.", no_args_is_help=True)

    @group.command("validate")
    def validate(
        config_file: str | None = ConfigOption,
        fmt: str | None = common.OutputOption,
        as_json: bool = common.JsonOption,
        files: bool = typer.Option(
            True,
            "--files/--no-files",
            help="Also check the files it names (model files, output names); --no-files: a config rendered"
            " away from its models (a chart in CI), schema and cross-references only.",
        ),
    ) -> None:
        """Validate the config and the files it names; print every problem with its path and exit 2 if any.

        The schema, the cross-references between sections, missing model files, and fields naming
        outputs a model does not have (``tolerance.outputs.<name>``, ``decisions.<name>``), decisions an
        output cannot take (its type or shape), all in one report.
        """
        from monitor.config import crosscheck
        from monitor.files import signature

        chosen = output.chosen(fmt, as_json)
        file, problems = crosscheck.file_problems(
            output.config_file(config_file), signature.output_names, files=files, types_of=signature.output_types
        )
        if problems:
            if output.structured(chosen):
                common.print_json({"config": str(file), "ok": False, "problems": problems}, chosen)
            else:
                listed = "\n".join(f"  {p}" for p in problems)
                typer.echo(f"onnxmon: error: {file}: {len(problems)} problem(s) in config:\n{listed}", err=True)
            raise typer.Exit(2)
        settings = common.load(config_file)
        data = {
            "config": str(settings.source),
            "ok": True,
            "models": len(settings.models),
            "benchsets": len(settings.benchsets),
        }
        sentence = f"{settings.source}: ok ({len(settings.models)} model(s), {len(settings.benchsets)} benchset(s))"
        output.emit(chosen, lambda: data, lambda wide: sentence)

    @group.command("show")
    def show(
        config_file: str | None = ConfigOption,
        fmt: str | None = common.OutputOption,
        as_json: bool = common.JsonOption,
    ) -> None:
        """Print the effective config (file + ONNXMON_* overrides, paths resolved), secrets masked: JSON or YAML."""
        chosen = output.chosen(fmt, as_json)
        settings = common.load(config_file)
        common.print_json(settings.redacted(), "yaml" if chosen == "yaml" else "json")

    @group.command("reference")
    def reference(
        config_file: str | None = common.UnusedConfigOption,
        fmt: str | None = common.OutputOption,
        as_json: bool = common.JsonOption,
    ) -> None:
        """Print the configuration reference (Markdown) generated from the schema; -o json wraps it."""
        from monitor.config import doc

        chosen = output.chosen(fmt, as_json)
        if output.structured(chosen):
            common.print_json({"format": "markdown", "text": doc.render()}, chosen)
            return
        typer.echo(doc.render(), nl=False)

    app.add_typer(group, name="config")
