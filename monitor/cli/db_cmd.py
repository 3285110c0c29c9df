"""``onnxmon db upgrade|current``: the history database's schema, migrated explicitly.

PostgreSQL is migrated by ``db upgrade`` (an initContainer in the Helm chart) or with
``store.migrate: auto``; several run together (a pod per node) serialize on the migration lock
(``monitor/store/migrate.py``): one migrates, the others wait and find the newest revision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from monitor.cli import common, output

if TYPE_CHECKING:
    from monitor.store import Store

UrlOption = typer.Option(None, "--url", help="Database URL (default: store.url from the config).")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Create and migrate the history database.", no_args_is_help=True)

    @group.command("upgrade")
    @output.options()
    def upgrade(
        url: str | None = UrlOption,
        *,
        out: output.Output,
    ) -> None:
        """Migrate the database to the newest schema (safe to run again)."""
        with _store(out.config_file, url) as store:
            before = store.current_revision()
            store.upgrade()
            after = store.current_revision()
            data = {"database": store.display_url, "before": before, "after": after}
            out.emit(lambda: data, lambda wide: f"{store.display_url}: {before or 'empty'} -> {after}")

    @group.command("current")
    @output.options()
    def current(
        url: str | None = UrlOption,
        check: bool = typer.Option(False, "--check", help="Exit 1 unless the database is at the newest revision."),
        *,
        out: output.Output,
    ) -> None:
        """Print the database's schema revision and the newest one this version ships."""
        from monitor.store import migrate

        with _store(out.config_file, url) as store:
            revision, head = store.current_revision(), store.head_revision()
            state = "up to date" if revision == head else "behind: run `onnxmon db upgrade`"
            if not migrate.known(revision):  # after a rollback of onnxmon: upgrading cannot help
                state = "newer than this onnxmon knows: a newer onnxmon migrated it; run that version"
            data = {"database": store.display_url, "revision": revision, "head": head, "up_to_date": revision == head}
            shown = "none (empty database)" if revision is None else revision or repr(revision)
            sentence = f"{store.display_url}: revision {shown}, head {head} ({state})"
            out.emit(lambda: data, lambda wide: sentence)
            if check and revision != head:
                raise typer.Exit(1)

    app.add_typer(group, name="db")


def _store(config_file: str | None, url: str | None) -> Store:
    from monitor.store import Store

    return Store(url) if url else Store.configured(common.settings(config_file).store)
