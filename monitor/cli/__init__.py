"""The ``onnxmon`` command line: a thin layer over the modules of ``monitor``.

Each command group lives in its own module in this package and is registered below.
User mistakes (``MonitorError``) print one line, no traceback, and exit 2. Every error line echoes
what the user typed (a model name, an id, a path) made inert first (``terminal.safe``): an ESC in
an argument is shown as ``\\x1b``, never obeyed by the terminal.
"""

from __future__ import annotations

import io
import sys
import traceback

import typer

from monitor import __version__
from monitor.cli import output, terminal, tree
from monitor.errors import MonitorError

app = typer.Typer(
    name="onnxmon",
    help="Continuous precision monitor for ONNX models served by ONNX Runtime.",
    no_args_is_help=True,
    add_completion=True,
    cls=tree.RootGroup,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"onnxmon {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    config_file: str | None = output.ConfigOption,
    output_format: str | None = typer.Option(
        None,
        "-o",
        "--output",
        metavar="FORMAT",
        parser=output.parse_format,
        help="Output format of the command: table | json | yaml | wide (also after the command).",
        show_default=False,
    ),
    as_json: bool = output.JsonOption,
) -> None:
    """Continuous precision monitor for ONNX models served by ONNX Runtime.

    -c/--config and -o/--output work before or after the command; after wins.
    """
    output.set_global(ctx, config_file=config_file, output=output_format, as_json=as_json)


_registered = False


def _register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    # --- command groups: one line each (keep sorted) ---
    from monitor.cli import (
        add_cmd,
        baseline_cmd,
        benchset_cmd,
        check_cmd,
        config_cmd,
        db_cmd,
        diagnose_cmd,
        diff_model_cmd,
        env_cmd,
        fleet_cmd,
        history_cmd,
        incident_cmd,
        lint_cmd,
        localize_cmd,
        quant_cmd,
        reference_cmd,
        rehearse_cmd,
        serve_cmd,
    )

    add_cmd.register(app)
    baseline_cmd.register(app)
    benchset_cmd.register(app)
    check_cmd.register(app)
    config_cmd.register(app)
    db_cmd.register(app)
    diagnose_cmd.register(app)
    diff_model_cmd.register(app)
    env_cmd.register(app)
    fleet_cmd.register(app)
    history_cmd.register(app)
    lint_cmd.register(app)
    incident_cmd.register(app)
    localize_cmd.register(app)
    quant_cmd.register(app)
    reference_cmd.register(app)
    rehearse_cmd.register(app)
    serve_cmd.register(app)


INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE: neither drift (1), usage (2) nor "could not measure" (3)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    _register()
    try:
        # With standalone_mode=False click *returns* the code of a typer.Exit instead of raising.
        code = app(args=argv, standalone_mode=False, prog_name="onnxmon")
    except MonitorError as exc:
        typer.echo(terminal.safe(f"onnxmon: error: {exc}"), err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception as exc:
        # Usage errors: typer may vendor its own click, so recognise them by shape, not class.
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            shown = io.StringIO()
            exc.show(file=shown)
            typer.echo(terminal.safe(shown.getvalue()), err=True, nl=False)
            return 2
        if type(exc).__name__ == "Abort":
            return 130
        # The store raises its own StoreUnavailable for a database it cannot use (loaded if it was raised).
        health = sys.modules.get("monitor.store.health")
        if health is not None and isinstance(exc, health.StoreUnavailable):
            line = f"onnxmon: error: the history store cannot be used: {exc}".splitlines()[0][:500]
            typer.echo(terminal.safe(line), err=True)
            return 3
        # A bug in onnxmon: never exit 1, which says "drift" to every script that reads the code.
        typer.echo(terminal.safe("".join(traceback.format_exception(exc))), err=True, nl=False)
        line = f"onnxmon: internal error ({type(exc).__name__}): a bug in onnxmon, please report it".splitlines()[0]
        typer.echo(terminal.safe(line), err=True)
        return INTERNAL_ERROR
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
