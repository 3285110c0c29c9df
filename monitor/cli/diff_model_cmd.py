"""``onnxmon diff-model OLD NEW`` and ``onnxmon diff-model --baseline MODEL``: what changed in a model file.

Without running either model. The first form compares two files. The second compares a
configured model's file (or ``NEW``, when given) with the manifest its active baseline keeps
(``model_manifest.json``): the on-call question "what is different from what we validated?",
answered without the old file. Against a manifest, digests say *that* a tensor changed and its
statistics how its distribution moved, not the element-wise change.

Exit codes follow the house rule that 1 means drift: a model that changed *is* the drift this
command looks for, so it exits 0 when the two models are the same, 1 when they differ, and 2 when
a file is missing or is not an ONNX model, the model is not configured, or its baseline keeps no
manifest (one line on stderr naming the file).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from monitor.cli import common, output
from monitor.errors import ConfigError

if TYPE_CHECKING:
    from monitor.modeldiff import ModelDiff


def register(app: typer.Typer) -> None:
    @app.command("diff-model")
    @output.options()
    def diff_model_cmd(
        files: list[Path] = typer.Argument(
            None, help="OLD NEW model files (.onnx; external data next to them); with --baseline, only NEW or none."
        ),
        baseline_of: str | None = typer.Option(
            None, "--baseline", help="Model name from the config: diff its file against its active baseline."
        ),
        top: int = typer.Option(10, "--top", min=0, help="Changes listed per kind in the text form."),
        limit: int = typer.Option(200, "--limit", min=1, help="Entries per list in --json (the rest are counted)."),
        quiet: bool = common.QuietOption,
        *,
        out: output.Output,
    ) -> None:
        """Diff ONNX models statically: weights, nodes, types, opsets; exit 1 when they differ."""
        from monitor import modeldiff

        given = list(files or [])
        if baseline_of is None:
            if len(given) != 2:
                raise ConfigError(f"diff-model takes OLD and NEW model files (got {len(given)}), or --baseline MODEL")
            diff = modeldiff.diff_models(given[0], given[1])
        else:
            if len(given) > 1:
                raise ConfigError(f"diff-model --baseline {baseline_of} takes at most one NEW file, got {len(given)}")
            diff = _against_baseline(out.config_file, baseline_of, given[0] if given else None)
        out.emit(lambda: diff.to_dict(limit=limit), lambda wide: diff.render(top=top), quiet=quiet)
        raise typer.Exit(1 if diff else 0)


def _against_baseline(config_file: str | None, model: str, new: Path | None) -> ModelDiff:
    from monitor import modeldiff
    from monitor.config.plan import plan_for
    from monitor.files import baselines

    plan = plan_for(common.settings(config_file), model)
    baseline = baselines.active(plan.baselines_dir, model)
    if baseline is None:
        raise ConfigError(f"model {model!r} has no active baseline under {plan.baselines_dir}")
    manifest = baseline.document(baselines.MODEL_MANIFEST)
    if manifest is None:
        raise ConfigError(
            f"baseline {baseline.id} keeps no {baselines.MODEL_MANIFEST} (captured before manifests existed);"
            f" re-capture: onnxmon baseline capture {model}"
        )
    target = new or plan.model.path
    return modeldiff.diff_against_manifest(manifest, modeldiff.load_model(target), old_name=baseline.id)
