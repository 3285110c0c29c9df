"""``onnxmon config validate|show|reference|from-triton``: check a config file before the daemon ever sees it."""

from __future__ import annotations

from pathlib import Path

import typer

from monitor.cli import common, output


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Validate and show the configuration.", no_args_is_help=True)

    @group.command("validate")
    @output.options()
    def validate(
        files: bool = typer.Option(
            True,
            "--files/--no-files",
            help="Also check the files it names (model files, output names); --no-files: a config rendered"
            " away from its models (a chart in CI), schema and cross-references only.",
        ),
        *,
        out: output.Output,
    ) -> None:
        """Validate the config and the files it names; print every problem with its path and exit 2 if any.

        The schema, the cross-references between sections, missing model files, and fields naming
        outputs a model does not have (``tolerance.outputs.<name>``, ``decisions.<name>``), decisions an
        output cannot take (its type or shape), generated benchmark sets that capture would refuse (a
        dynamic dim without a size, a range naming no input), all in one report.
        """
        from monitor.config import crosscheck
        from monitor.files import benchset_generate, signature

        file, problems = crosscheck.file_problems(
            out.config_file,
            signature.output_names,
            files=files,
            types_of=signature.output_types,
            generate_check=benchset_generate.spec_problems,
        )
        if problems:
            listed = "\n".join(f"  {p}" for p in problems)
            out.emit(
                lambda: {"config": str(file), "ok": False, "problems": problems},
                lambda wide: f"onnxmon: error: {file}: {len(problems)} problem(s) in config:\n{listed}",
                err=True,
            )
            raise typer.Exit(2)
        settings = common.load(out.config_file)
        data = {
            "config": str(settings.source),
            "ok": True,
            "models": len(settings.models),
            "benchsets": len(settings.benchsets),
        }
        sentence = f"{settings.source}: ok ({len(settings.models)} model(s), {len(settings.benchsets)} benchset(s))"
        out.emit(lambda: data, lambda wide: sentence)

    @group.command("show")
    @output.options()
    def show(*, out: output.Output) -> None:
        """Print the effective config (file + ONNXMON_* overrides, paths resolved), secrets masked: JSON or YAML."""
        settings = common.load(out.config_file)
        out.emit(settings.redacted)  # data only: a table would be the same JSON

    @group.command("reference")
    @output.options(reads_config=False)
    def reference(*, out: output.Output) -> None:
        """Print the configuration reference (Markdown) generated from the schema; -o json wraps it."""
        from monitor.config import doc

        text = doc.render()
        out.emit(lambda: {"format": "markdown", "text": text}, lambda wide: text)

    @group.command("from-triton")
    @output.options(reads_config=False)
    def from_triton(
        repo: Path = typer.Argument(
            ..., help="The Triton model repository (one folder per model, each a config.pbtxt)."
        ),
        endpoint_url: str = typer.Option(
            "", "--endpoint-url", help="host:port of the Triton server: each model gets an endpoint entry too."
        ),
        protocol: str = typer.Option("v2-grpc", "--protocol", help="v2-grpc (Triton's 8001) or v2-rest (8000)."),
        *,
        out: output.Output,
    ) -> None:
        """Print config entries replicating each ONNX Runtime model of a Triton repository, naming what cannot be.

        Reads each config.pbtxt (platform onnxruntime_onnx or backend onnxruntime): instance groups, the graph
        level, TensorRT / CUDA / OpenVINO accelerators (TensorRT's precision mode), CUDA and thread parameters,
        dynamic batching (as checks.batch_invariance) and the response cache; docs/serving.md.
        """
        from monitor.serving import triton_repo

        endpoint = {"protocol": protocol, "url": endpoint_url} if endpoint_url else None
        read = triton_repo.read(repo, endpoint=endpoint)
        config = {"benchsets": [m.benchset for m in read.models], "models": [m.model for m in read.models]}
        data = {
            "repository": str(repo),
            "config": config,
            "not_replicated": {m.name: m.not_replicated for m in read.models},
            "skipped": read.skipped,
        }
        out.emit(lambda: data, lambda wide: triton_repo.as_yaml(repo, read))

    app.add_typer(group, name="config")
