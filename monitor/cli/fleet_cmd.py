"""``onnxmon fleet [MODEL]``: the fleet's vote on output digests; which node computes differently (docs/fleet.md).

Per model: its groups (nodes on one stack key, the digest they agree on, the mode of the vote and why),
its outliers (node, kind, since when, the samples that differ) and the stack fields that separate its
groups. Exit 1 while an outlier stands (``outvoted``, ``suspect_hardware``, ``stack``; a ``transient``
one is named only), 0 otherwise.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from rich import box
from rich.text import Text

from monitor.cli import common, output
from monitor.errors import MonitorError


def register(app: typer.Typer) -> None:
    @app.command("fleet")
    @output.options()
    def fleet(
        model: str | None = typer.Argument(None, help="Only this model (default: every model with digests)."),
        url: str | None = typer.Option(None, "--url", help="Database URL (default: store.url from the config)."),
        *,
        out: output.Output,
    ) -> None:
        """Compare the nodes' output digests per model and stack; exit 1 when a node computes differently."""
        from monitor.fleet import report

        settings = common.settings(out.config_file)
        with common.open_store(settings, url) as store:
            votes = report.vote(store, settings, datetime.now(UTC), model=model)
            if model is not None and not votes and model not in store.models():
                known = ", ".join(store.models()) or "none yet"
                raise MonitorError(f"model '{model}' has no history in {store.display_url} (models: {known})")
        documents = [report.document(v) for v in votes]
        out.emit(lambda: documents, lambda wide: _table(documents, wide=wide))
        raise typer.Exit(1 if any(not d["consistent"] for d in documents) else 0)


def _table(documents: list[dict[str, Any]], *, wide: bool) -> Any:
    if not documents:
        return "no run with output digests yet: every node's next check records them"
    table = common.PlainTable(title=Text("fleet vote (latest run per node)"), title_justify="left", box=box.HEAVY_HEAD)
    for header in ("model", "group", "nodes", "mode", "digest", "stack", "outliers"):
        table.add_column(header, overflow="fold")
    if wide:
        table.add_column("why / findings", overflow="fold")
    for document in documents:
        by_group: dict[int, list[str]] = {}
        for o in document["outliers"]:
            by_group.setdefault(o["group"], []).append(f"{o['node']} {o['kind']} samples {_samples(o['samples'])}")
        for g in document["groups"]:
            nodes = f"{len(g['agreeing'])}/{len(g['nodes'])}" + ("" if g["quorum"] else " (no quorum)")
            digest = (g["digest"] or "-") if wide else (g["digest"] or "-")[:12]
            cells = [document["model"], str(g["group"]), nodes, g["mode"], digest, g["summary"]]
            cells.append("; ".join(by_group.get(g["group"], [])) or "-")
            if wide:
                cells.append("; ".join([g["why"], *(f"{f['detail']} (fix: {f['fix']})" for f in g["findings"])]))
            table.add_row(*cells)
        if document["separated_by"]:
            table.add_row(
                document["model"], "", "", "", "", "separated by " + ", ".join(document["separated_by"][:6]), ""
            )
    return table


def _samples(samples: list[int]) -> str:
    return ",".join(str(s) for s in samples[:6]) + ("…" if len(samples) > 6 else "")
