"""``onnxmon benchset create|import|verify|list``: manage the benchmark sets checks replay."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from monitor import jsonsafe
from monitor.cli import common
from monitor.config import settings as config
from monitor.errors import BenchsetError
from monitor.files import benchsets as benchset

ConfigOption = typer.Option(None, "-c", "--config", help="Config file (default: $ONNXMON_CONFIG or ./onnxmon.yaml).")
RootOption = typer.Option(None, "--root", help="Benchset directory (default: store.benchsets_dir of the config).")
FilesArgument = typer.Argument(..., help="npz files, one onnx test-data directory, or one JSON file.")
KindOption = typer.Option(None, "--kind", help="npz | onnx-test-data | polygraphy-json (default: guessed).")
VersionOption = typer.Option(None, "--version", help="Version to verify (default: the newest).")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Create, import, verify and list benchmark sets.", no_args_is_help=True)

    @group.command("create")
    def create(name: str, config_file: str | None = ConfigOption, quiet: bool = common.QuietOption) -> None:
        """Materialize the set NAME declared in the config (a new version only if its declaration changed)."""
        settings = config.load(config_file)
        root = settings.store.benchsets_dir
        before = _current_version(root, name)
        console = common.console()
        with console.status(f"materializing {name} …", spinner="dots") if not quiet else contextlib.nullcontext():
            bs = benchset.materialize(settings.benchset(name), root)
        if quiet:
            return
        state = "unchanged" if before == bs.version else "created"
        typer.echo(f"{bs.name} v{bs.version} ({state}): {len(bs)} sample(s), sha256 {bs.sha256}")

    @group.command("import")
    def import_(
        name: str,
        files: list[Path] = FilesArgument,
        kind: str | None = KindOption,
        config_file: str | None = ConfigOption,
        root: Path | None = RootOption,
    ) -> None:
        """Materialize set NAME from files given by hand."""
        directory = _root(root, config_file)
        before = _current_version(directory, name)
        bs = benchset.import_files(name, files, directory, kind or _guess_kind(files))
        state = "unchanged" if before == bs.version else "created"
        typer.echo(f"{bs.name} v{bs.version} ({state}): {len(bs)} sample(s), sha256 {bs.sha256}")

    @group.command("verify")
    def verify(
        name: str,
        version: int | None = VersionOption,
        config_file: str | None = ConfigOption,
        root: Path | None = RootOption,
    ) -> None:
        """Re-hash every tensor of set NAME; exit 1 and print each problem if any."""
        bs = benchset.open_benchset(_root(root, config_file), name, version)
        problems = benchset.verify(bs)
        for problem in problems:
            typer.echo(problem)
        if problems:
            typer.echo(f"{bs.name} v{bs.version}: {len(problems)} problem(s)")
            raise SystemExit(1)  # survives standalone_mode=False, where click returns typer.Exit's code
        typer.echo(f"{bs.name} v{bs.version}: ok ({len(bs)} sample(s), sha256 {bs.sha256})")

    @group.command("list")
    def list_(
        as_json: bool = typer.Option(False, "--json", help="Print JSON."),
        all_versions: bool = typer.Option(False, "--all", help="Every version, not only the newest."),
        config_file: str | None = ConfigOption,
        root: Path | None = RootOption,
    ) -> None:
        """List the sets (their newest version unless --all)."""
        sets = benchset.list_benchsets(_root(root, config_file), all_versions=all_versions)
        if as_json:
            rows = [
                {
                    "name": bs.name,
                    "version": bs.version,
                    "samples": len(bs),
                    "sha256": bs.sha256,
                    "source": bs.source,
                    "created_at": bs.created_at,
                    "directory": str(bs.directory),
                }
                for bs in sets
            ]
            typer.echo(jsonsafe.dumps(rows, indent=2))
            return
        for bs in sets:
            typer.echo(f"{bs.name}\tv{bs.version}\t{len(bs)} sample(s)\t{bs.source}\t{bs.created_at}\t{bs.sha256}")

    app.add_typer(group, name="benchset")


def _root(root: Path | None, config_file: str | None) -> Path:
    return root if root is not None else config.load(config_file).store.benchsets_dir


def _current_version(root: Path, name: str) -> int | None:
    try:
        return benchset.open_benchset(root, name).version
    except BenchsetError:
        return None


def _guess_kind(files: list[Path]) -> str:
    if all(f.suffix == ".npz" for f in files):
        return "npz"
    if len(files) == 1 and files[0].is_dir():
        return "onnx-test-data"
    if len(files) == 1 and files[0].suffix == ".json":
        return "polygraphy-json"
    raise BenchsetError(
        f"cannot tell the kind of {[str(f) for f in files]}; pass --kind npz|onnx-test-data|polygraphy-json"
    )
