"""The localization section of a run page: first changed and first out-of-tolerance nodes, worst nodes, plot.

The daemon stores ``LocalizationReport.to_dict()`` under a failing run's ``details["localization"]``
(``localize_on_fail``), or ``{"error": ...}`` when localization itself failed; both are shown
(``templates/localization.html``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor.api.web import templating
from monitor.api.web.formats import num
from monitor.localize import explorer
from monitor.localize.report import LocalizationReport, NodeDivergence

if TYPE_CHECKING:
    from markupsafe import Markup

_SIDES = {
    "baseline": "the baseline's stored intermediates",
    "unoptimized": "the same model, unoptimized on CPU",
}


@dataclass(frozen=True)
class Headline:
    """``First changed node: ...``: the node, or None when there is none."""

    what: str
    node: NodeDivergence | None
    origin: str


@dataclass(frozen=True)
class Localized:
    error: str | None  # localization did not finish: why
    report: LocalizationReport | None  # None with no error: the stored report is not readable
    headlines: list[Headline]
    facts: list[tuple[str, str]]
    reference: str  # deterministic, stored or nondeterministic (``report.nondeterministic_reference`` names)
    plot: Markup | None  # the per-node plot (``templating.localize_plot``)
    explorer_url: str


def node_data(details: Mapping[str, Any], model_path: Path) -> dict[str, Any]:
    """The run's localization as Model Explorer node data (``localize/explorer.py``); empty results without one."""
    ids: dict[str, str] = {}
    try:
        graph = explorer.graph_name(model_path)
        ids = explorer.model_ids(model_path)
    except Exception:  # the model file moved or is unreadable now: the adapter's default graph name
        graph = "main_graph"
    data = details.get("localization")
    if not isinstance(data, Mapping) or "error" in data:
        return {graph: {"results": {}}}
    try:
        report = LocalizationReport.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return {graph: {"results": {}}}
    return explorer.node_data(report, graph, ids=ids)


def view(details: Mapping[str, Any], *, explorer_url: str = "") -> Localized | None:
    """The section's values, or None when the run was not localized; ``explorer_url`` links its node data."""
    data = details.get("localization")
    if not isinstance(data, Mapping):
        return None
    if "error" in data:
        return Localized(str(data["error"]), None, [], [], "", None, explorer_url)
    try:
        report = LocalizationReport.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return Localized(None, None, [], [], "", None, explorer_url)
    return Localized(
        error=None,
        report=report,
        headlines=[
            _headline("First changed node", report.first_changed),
            _headline("First node out of tolerance", report.first_out_of_tolerance),
        ],
        facts=_facts(report),
        reference=_reference(report),
        plot=templating.localize_plot(report),
        explorer_url=explorer_url,
    )


def render(details: Mapping[str, Any], *, explorer_url: str = "") -> str:
    """The section alone (empty when the run was not localized), as the run page includes it."""
    return templating.render("localization.html", localization=view(details, explorer_url=explorer_url))


def _headline(what: str, node: NodeDivergence | None) -> Headline:
    if node is None:
        return Headline(what, None, "")
    if node.inputs_changed:
        return Headline(what, node, "its inputs had already changed (the change came from upstream)")
    return Headline(what, node, "its inputs had not changed: this node introduced the change")


def _facts(report: LocalizationReport) -> list[tuple[str, str]]:
    sides = {**_SIDES, "model": f"the reference model {report.reference_model}"}
    return [
        ("compared against", sides.get(report.against, report.against)),
        ("changed means", f"{report.comparison.replace('_', ' ')}: {report.comparison_detail}"),
        ("out of tolerance means", report.rule_detail or report.threshold_rule),
        ("graph level", f"{report.graph_level} ({report.graph_view} graph): {report.graph_level_detail}"),
        ("search", report.mode),
        ("nodes examined", f"{len(report.profile)} of {report.nodes_total or '?'}"),
        ("runs / time", f"{report.runs} session run(s), {num(report.seconds)} s"),
    ]


def _reference(report: LocalizationReport) -> str:
    if report.nondeterministic_reference:
        return "nondeterministic"
    return "deterministic" if report.against != "baseline" else "stored"
