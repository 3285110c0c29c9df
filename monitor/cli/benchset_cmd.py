"""``onnxmon benchset create|import|verify|list|stage|promote``: manage the benchmark sets checks replay."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from monitor import jsonsafe
from monitor.cli import common, output
from monitor.errors import BenchsetError
from monitor.files import benchsets

RootOption = typer.Option(None, "--root", help="Benchset directory (default: store.benchsets_dir of the config).")
FilesArgument = typer.Argument(..., help="npz files, one onnx test-data directory, or one JSON file.")
KindOption = typer.Option(None, "--kind", help="npz | onnx-test-data | polygraphy-json (default: guessed).")
NameArgument = typer.Argument(..., help="Benchmark set name (as declared in the config).")
VersionOption = typer.Option(None, "--version", help="Version to verify (default: the newest).")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Create, import, verify and list benchmark sets.", no_args_is_help=True)

    @group.command("create")
    @output.options()
    def create(
        name: str = NameArgument,
        quiet: bool = common.QuietOption,
        *,
        out: output.Output,
    ) -> None:
        """Materialize the set NAME declared in the config (a new version only if its declaration changed)."""
        settings = common.load(out.config_file)
        root = settings.store.benchsets_dir
        before = _current_version(root, name)
        console = common.console()
        busy = not quiet and output.is_terminal()
        with console.status(f"materializing {name} …", spinner="dots") if busy else contextlib.nullcontext():
            bs = benchsets.materialize(settings.benchset(name), root)
        if quiet:
            return
        _print_state(out, bs, "unchanged" if before == bs.version else "created")

    @group.command("import")
    @output.options()
    def import_(
        name: str = NameArgument,
        files: list[Path] = FilesArgument,
        kind: str | None = KindOption,
        root: Path | None = RootOption,
        *,
        out: output.Output,
    ) -> None:
        """Materialize set NAME from files given by hand."""
        directory = _root(root, out.config_file)
        before = _current_version(directory, name)
        bs = benchsets.import_files(name, files, directory, kind or _guess_kind(files))
        _print_state(out, bs, "unchanged" if before == bs.version else "created")

    @group.command("stage")
    @output.options()
    def stage(
        name: str = NameArgument,
        files: list[Path] = typer.Argument(
            ..., help="Samples of real traffic: .npz files or OIP request payloads (.json)."
        ),
        *,
        out: output.Output,
    ) -> None:
        """Stage samples of real traffic for set NAME (declared imported: true), validated and deduplicated;
        they become a version only with `onnxmon benchset promote NAME`."""
        from monitor.files import traffic

        settings = common.load(out.config_file)
        if not settings.benchset(name).imported:
            raise BenchsetError(f"benchset {name!r} is not declared 'imported: true': traffic cannot be added to it")
        spec = traffic.signature_for([(m.name, m.path) for m in settings.models if m.benchset == name], name)
        rows = []
        for path in files:
            staged = traffic.stage(settings.store.benchsets_dir, name, traffic.file_sample(path), spec, where=str(path))
            rows.append({"file": str(path), "digest": staged.digest, "duplicate": staged.duplicate})
        count = len(traffic.staged(settings.store.benchsets_dir, name))
        new_ones = sum(not r["duplicate"] for r in rows)
        out.emit(
            lambda: {"benchset": name, "samples": rows, "staged": count},
            lambda wide: (
                f"{name}: {new_ones} staged, {len(rows) - new_ones} duplicate(s); {count} waiting for promotion"
            ),
        )

    @group.command("promote")
    @output.options()
    def promote(name: str = NameArgument, *, out: output.Output) -> None:
        """Make the staged samples of set NAME its next version (versioned, checksummed)."""
        from monitor.files import traffic

        settings = common.load(out.config_file)
        settings.benchset(name)
        _print_state(out, traffic.promote(settings.store.benchsets_dir, name), "created")

    @group.command("verify")
    @output.options()
    def verify(
        name: str = NameArgument,
        version: int | None = VersionOption,
        root: Path | None = RootOption,
        *,
        out: output.Output,
    ) -> None:
        """Re-hash every tensor of set NAME; exit 1 and print each problem if any."""
        bs = benchsets.open_benchset(_root(root, out.config_file), name, version)
        problems = benchsets.verify(bs)
        summary = f"{len(problems)} problem(s)" if problems else f"ok ({len(bs)} sample(s), sha256 {bs.sha256})"
        out.emit(
            lambda: _row(bs) | {"ok": not problems, "problems": problems},
            lambda wide: [*problems, f"{bs.name} v{bs.version}: {summary}"],
        )
        if problems:
            raise SystemExit(1)  # survives standalone_mode=False, where click returns typer.Exit's code

    @group.command("list")
    @output.options()
    def list_(
        all_versions: bool = typer.Option(False, "--all", help="Every version, not only the newest."),
        root: Path | None = RootOption,
        *,
        out: output.Output,
    ) -> None:
        """List the sets (their newest version unless --all)."""
        sets = benchsets.list_benchsets(_root(root, out.config_file), all_versions=all_versions)

        def table(wide: bool) -> common.PlainTable:
            shown = common.PlainTable("name", "version", "samples", "source", "created", "sha256")
            for bs in sets:
                digest = bs.sha256 if wide else bs.sha256[:16]
                shown.add_row(bs.name, f"v{bs.version}", str(len(bs)), bs.source, bs.created_at, digest)
            return shown

        out.emit(lambda: [_row(bs) for bs in sets], table)

    app.add_typer(group, name="benchset")


def _row(bs: benchsets.Benchset) -> dict[str, object]:
    return {
        "name": bs.name,
        "version": bs.version,
        "samples": len(bs),
        "sha256": bs.sha256,
        "source": bs.source,
        "created_at": jsonsafe.normalized(str(bs.created_at)),  # RFC 3339 UTC, as in every onnxmon JSON
        "directory": str(bs.directory),
    }


def _print_state(out: output.Output, bs: benchsets.Benchset, state: str) -> None:
    out.emit(
        lambda: _row(bs) | {"state": state},
        lambda wide: f"{bs.name} v{bs.version} ({state}): {len(bs)} sample(s), sha256 {bs.sha256}",
    )


def _root(root: Path | None, config_file: str | None) -> Path:
    return root if root is not None else common.load(config_file).store.benchsets_dir


def _current_version(root: Path, name: str) -> int | None:
    try:
        return benchsets.open_benchset(root, name).version
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
