"""``onnxmon reference torch MODEL --factory FILE.py:FUNCTION``: PyTorch as the model's baseline.

The factory's ``nn.Module`` runs the model's benchmark set; its outputs (and with
``--intermediates`` its layers' outputs, under their ONNX tensor names) are stored as a baseline
of source ``reference``: ``onnxmon check`` then compares ONNX Runtime with PyTorch and ``onnxmon
localize`` names the first ONNX node that departs from it. Exit codes: 0 stored, PyTorch consumed
the benchmark set's inputs; 1 stored, but PyTorch consumed other inputs (``input_mismatch``, each
described); 2 a usage mistake (no torch, a bad factory, a module in training mode, ``sys.exit()`` in the
factory's code); 3 the factory's code ran past ``--timeout`` (it runs in-process), nothing stored.
"""

from __future__ import annotations

import typer

from monitor.cli import common, output
from monitor.config.plan import plan_for


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Make reference baselines from the framework a model was exported from.", no_args_is_help=True
    )

    @group.command("torch")
    @output.options()
    def torch_cmd(
        model: str = typer.Argument(..., help="Model name from the config."),
        factory: str = typer.Option(
            ..., "--factory", help="FILE.py:FUNCTION returning the nn.Module the model was exported from (eval mode)."
        ),
        intermediates: bool = typer.Option(
            False, "--intermediates", help="Also store the layers' outputs mapped to ONNX tensor names (localize)."
        ),
        samples: int = typer.Option(1, "--samples", min=1, help="How many samples' intermediates to store."),
        promote: bool = typer.Option(False, "--promote", help="Make it the active baseline."),
        note: str = typer.Option("", "--note", help="Free text kept with the baseline."),
        timeout: float = typer.Option(
            3600.0,
            "--timeout",
            min=0.0,
            help="Seconds the factory's code may run in all (0: no limit); past it exit 3.",
        ),
        *,
        out: output.Output,
    ) -> None:
        """Run the PyTorch model over the benchmark set and store its outputs as a reference baseline."""
        from monitor import torchref
        from monitor.daemon import child

        settings = common.settings(out.config_file)
        plan = plan_for(settings, model)
        limit = settings.daemon.memory_limit_mb
        made = torchref.reference_torch(
            plan,
            factory,
            intermediates=intermediates,
            samples=samples,
            promote=promote,
            note=note,
            timeout=timeout,
            # the stack the check runs, snapshotted in a child without torch: not this process's CUDA libraries
            environment=lambda p: child.environment_isolated(p, memory_limit_mb=limit),
        )
        db = common.open_store(settings)
        db.record_baseline(made.baseline.meta.store_record(path=made.baseline.directory, active=made.active))

        def text(wide: bool) -> list[str]:
            state = "active" if made.active else "inactive"
            lines = [
                f"reference {made.baseline.id} ({made.baseline.meta.sample_count} samples, {state}) from torch"
                f" {made.facts['torch_version']}, {made.facts['exporter']} exporter, in {made.baseline.directory}"
            ]
            if intermediates:
                lines.append(made.coverage)
                if made.facts["coverage"].get("hint"):
                    lines.append(f"  {made.facts['coverage']['hint']}")
            lines += [f"input_mismatch: {m['description']}" for m in made.facts["input_check"]["mismatches"]]
            return lines

        out.emit(made.to_dict, text)
        raise typer.Exit(0 if made else 1)

    app.add_typer(group, name="reference")
