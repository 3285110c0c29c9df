"""The Grafana dashboard and the metric contract: importable, wired to ``${datasource}``, and
using only metrics (and labels) that ``docs/metrics.md`` defines.

This module also owns the helpers that list every PromQL expression of the dashboard and of
the alert rules; ``python -m tests.test_dashboard`` prints them with the dashboard variables
substituted (``$model`` -> ``.*``), one per line, so an end-to-end test can run each against a
real Prometheus.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import need_binary

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "onnxmon.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yaml"
METRICS_DOC = ROOT / "docs" / "metrics.md"

# Labels Prometheus attaches to every scraped series (Kubernetes adds namespace and pod, the
# chart's ServiceMonitor node, a multi-cluster setup cluster: an external label or a relabeling).
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "node", "cluster"})
# Dashboard variables that select label values; they may appear only as `label=~"$var"`.
SELECTOR_VARIABLES = ("cluster", "job", "namespace", "node", "instance", "model", "output")
# What each variable becomes when an expression leaves Grafana.
SUBSTITUTIONS = {
    **dict.fromkeys(SELECTOR_VARIABLES, ".*"),
    "window": "6h",
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1d",
}


# --------------------------------------------------------------------------- the contract


def documented_metrics(path: Path = METRICS_DOC) -> dict[str, tuple[str, frozenset[str]]]:
    """``name -> (type, labels)`` from every table row of docs/metrics.md whose first cell is a name."""
    row = re.compile(r"^\|\s*`([A-Za-z_:][A-Za-z0-9_:]*)`\s*\|\s*([a-z]+)\s*\|([^|]*)\|", re.MULTILINE)
    metrics: dict[str, tuple[str, frozenset[str]]] = {}
    for name, kind, labels in row.findall(path.read_text(encoding="utf-8")):
        metrics[name] = (kind, frozenset(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", labels)))
    return metrics


# The metrics the issue asks for: (exposed name, type, labels).
REQUIRED_METRICS = [
    ("onnxmon_build_info", "gauge", {"version"}),
    (
        "onnxmon_runtime_info",
        "gauge",
        {
            "onnxruntime_version",
            "onnxruntime_package",
            "cuda_version",
            "cudnn_version",
            "driver_version",
            "gpu_name",
            "node",
        },
    ),
    ("onnxmon_model_info", "gauge", {"model", "model_sha256", "opset"}),
    ("onnxmon_baseline_info", "gauge", {"model", "baseline_id", "source", "environment"}),
    ("onnxmon_runs_total", "counter", {"model"}),
    ("onnxmon_run_failures_total", "counter", {"model", "reason"}),
    ("onnxmon_run_duration_seconds", "histogram", {"model"}),
    ("onnxmon_last_run_timestamp_seconds", "gauge", {"model"}),
    ("onnxmon_last_success_timestamp_seconds", "gauge", {"model"}),
    ("onnxmon_last_run_success", "gauge", {"model"}),
    ("onnxmon_last_run_verdict", "gauge", {"model", "verdict"}),
    ("onnxmon_output_max_abs_error", "gauge", {"model", "output"}),
    ("onnxmon_output_max_rel_error", "gauge", {"model", "output"}),
    ("onnxmon_output_rms_error", "gauge", {"model", "output"}),
    ("onnxmon_output_cosine_similarity", "gauge", {"model", "output"}),
    ("onnxmon_output_mismatch_ratio", "gauge", {"model", "output"}),
    ("onnxmon_output_nondeterministic", "gauge", {"model", "output"}),
    ("onnxmon_output_tolerance_atol", "gauge", {"model", "output"}),
    ("onnxmon_output_tolerance_rtol", "gauge", {"model", "output"}),
    ("onnxmon_output_tolerance_max_mismatch_ratio", "gauge", {"model", "output"}),
    ("onnxmon_output_error_over_tolerance", "gauge", {"model", "output"}),
    ("onnxmon_results_not_stored_total", "counter", set()),
    ("onnxmon_database_refused_results_total", "counter", set()),
    ("onnxmon_spool_entries_set_aside_total", "counter", set()),
    ("onnxmon_stored_results_text_replaced_total", "counter", set()),
    ("onnxmon_output_out_of_tolerance_total", "counter", {"model", "output"}),
    ("onnxmon_output_checks_total", "counter", {"model", "output"}),
    ("onnxmon_provider_fallback", "gauge", {"model"}),
    ("onnxmon_diagnosis_info", "gauge", {"model", "cause"}),
    (
        "onnxmon_last_run_info",
        "gauge",
        {"model", "verdict", "reason", "attribution", "cause", "error_over_tolerance", "environment_changed"},
    ),
    ("onnxmon_environment_matches_baseline", "gauge", {"model"}),
    ("onnxmon_environment_changes_total", "counter", {"model"}),
    ("onnxmon_environment_changed_timestamp_seconds", "gauge", {"model"}),
    ("onnxmon_baseline_promoted_timestamp_seconds", "gauge", {"model"}),
    ("onnxmon_recent_runs", "gauge", {"model"}),
    ("onnxmon_recent_error_runs", "gauge", {"model"}),
    ("onnxmon_recent_failing_runs", "gauge", {"model"}),
    ("onnxmon_output_recent_failing_runs", "gauge", {"model", "output"}),
    ("onnxmon_baseline_promotions_total", "counter", {"model"}),
    ("onnxmon_config_last_reload_successful", "gauge", set()),
    ("onnxmon_config_last_reload_success_timestamp_seconds", "gauge", set()),
    ("onnxmon_schedule_interval_seconds", "gauge", {"model"}),
    ("onnxmon_scheduler_missed_runs_total", "counter", {"model"}),
    ("onnxmon_scheduler_skipped_runs_total", "counter", {"model"}),
    ("onnxmon_scheduler_backed_off_runs_total", "counter", {"model"}),
]


# --------------------------------------------------------------------------- PromQL expressions


@dataclass(frozen=True)
class PromQLExpr:
    """One PromQL expression: where it comes from (``kind`` and ``name``) and its text.

    ``kind`` is ``panel``, ``annotation``, ``variable`` (the selector inside ``label_values``),
    ``record`` or ``alert``. Alert expressions and panels ending in a filter (``> 0``) return
    data only while their condition holds.
    """

    kind: str
    name: str
    expr: str


def substitute(expr: str) -> str:
    """``expr`` with Grafana variables replaced (``$model`` -> ``.*``, ``$window`` -> ``6h``)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in SUBSTITUTIONS:
            raise KeyError(f"no substitution for dashboard variable ${name} in {expr!r}")
        return SUBSTITUTIONS[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", value, expr)


def _dashboard_expressions(dashboard: dict[str, Any]) -> Iterator[PromQLExpr]:
    for panel in query_panels(dashboard):
        for target in panel.get("targets", []):
            yield PromQLExpr("panel", f"{panel['title']} [{target['refId']}]", target["expr"])
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            yield PromQLExpr("annotation", annotation["name"], annotation["expr"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
            assert match, f"variable {variable['name']}: expected label_values(selector, label), got {query!r}"
            yield PromQLExpr("variable", variable["name"], match.group(1))


def _rule_expressions(rules: dict[str, Any]) -> Iterator[PromQLExpr]:
    for group in rules["groups"]:
        for rule in group["rules"]:
            kind = "alert" if "alert" in rule else "record"
            yield PromQLExpr(kind, rule[kind], rule["expr"].strip())


def promql_expressions(*, substituted: bool = True) -> list[PromQLExpr]:
    """Every PromQL expression of the dashboard and of the alert rules, variables substituted."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    found = [*_dashboard_expressions(dashboard), *_rule_expressions(rules)]
    if not substituted:
        return found
    return [PromQLExpr(e.kind, e.name, substitute(e.expr)) for e in found]


def query_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that queries (rows excluded), including panels nested in collapsed rows."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      |(?P<range>\[[^\]]*\])
      |(?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_:])|\$\w+|\$\{\w+\})
      |(?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
      |(?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=,(){}@])
      |(?P<space>\s+)""",
    re.VERBOSE,
)
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_KEYWORDS = _GROUPING | {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end"}
# Aggregations may put their grouping first: `sum by (model) (x)`.
_AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"}
)


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"cannot tokenize PromQL at {expr[position : position + 20]!r} in {expr!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append((kind, match.group()))
        position = match.end()
    return tokens


def metric_selectors(expr: str) -> list[tuple[str, frozenset[str]]]:
    """Each vector selector of ``expr``: its metric name and the label names it matches on.

    A small PromQL tokenizer, enough for our expressions: an identifier is a metric unless it
    calls a function, is a keyword, or sits in a label list (``by (...)``, ``{...}``).
    """
    tokens = _tokens(expr)
    selectors: list[tuple[str, frozenset[str]]] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and text in _GROUPING and following == "(":
            i = tokens.index(("op", ")"), i) + 1  # skip the label list
            continue
        called = following == "(" or (text in _AGGREGATIONS and following in ("by", "without"))
        if kind == "ident" and (called or text in _KEYWORDS):
            i += 1
            continue
        if (kind == "ident") or (kind == "op" and text == "{"):
            name = text if kind == "ident" else ""
            labels: set[str] = set()
            j = i + 1 if kind == "ident" else i
            if j < len(tokens) and tokens[j] == ("op", "{"):
                close = tokens.index(("op", "}"), j)
                for k in range(j + 1, close):
                    if tokens[k][0] == "ident" and k + 1 < close and tokens[k + 1][1] in ("=", "!=", "=~", "!~"):
                        if tokens[k][1] == "__name__" and tokens[k + 1][1] == "=":
                            name = tokens[k + 2][1][1:-1]
                        else:
                            labels.add(tokens[k][1])
                j = close + 1
            if not name:
                raise ValueError(f"selector without a metric name in {expr!r}")
            selectors.append((name, frozenset(labels)))
            i = max(j, i + 1)
            continue
        i += 1
    return selectors


def undocumented(expr: str, documented: dict[str, tuple[str, frozenset[str]]]) -> list[str]:
    """Problems of ``expr`` against the contract: unknown metrics, labels a metric does not have."""
    problems: list[str] = []
    for name, labels in metric_selectors(expr):
        allowed = set(TARGET_LABELS)
        base = name
        for suffix in ("_bucket", "_sum", "_count"):
            stem = name.removesuffix(suffix)
            if name.endswith(suffix) and documented.get(stem, ("",))[0] == "histogram":
                base = stem
                allowed |= {"le"} if suffix == "_bucket" else set()
        if base not in documented:
            problems.append(f"metric {name} is not in docs/metrics.md")
            continue
        extra = labels - allowed - documented[base][1]
        if extra:
            problems.append(f"{name} has no label(s) {sorted(extra)} in docs/metrics.md")
    return problems


# --------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def test_dashboard_is_importable_json_with_uid_onnxmon(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "onnxmon"
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["title"] and isinstance(dashboard["panels"], list)
    assert "id" not in dashboard or dashboard["id"] is None, "an exported id pins the dashboard to one Grafana"


def test_every_query_panel_and_target_reads_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in query_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            assert annotation["datasource"]["uid"] == "${datasource}", annotation["name"]


def test_panel_ids_and_uids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in dashboard["panels"]] + [p["id"] for r in dashboard["panels"] for p in r.get("panels", [])]
    assert len(ids) == len(set(ids))
    uids = re.findall(r'"uid":\s*"([^"$]+)"', DASHBOARD.read_text(encoding="utf-8"))
    uids = [u for u in uids if u not in ("-- Grafana --", "${datasource}")]
    assert len(uids) == len(set(uids)), uids


def test_template_variables_cover_datasource_cluster_job_namespace_node_instance_model_output(
    dashboard: dict[str, Any],
) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in SELECTOR_VARIABLES:
        assert variables[name]["type"] == "query", name
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*", name


def test_cluster_is_hidden_and_job_is_shown_and_every_query_selects_both(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert [v["name"] for v in dashboard["templating"]["list"]][:4] == ["datasource", "cluster", "job", "namespace"]
    # hidden: a single-cluster Prometheus has no cluster label (the chart shows it with showMultiCluster)
    assert (variables["cluster"]["hide"], variables["job"]["hide"]) == (2, 0)
    for expr in promql_expressions(substituted=False):
        if expr.kind in ("panel", "annotation"):
            for name, labels in metric_selectors(expr.expr):
                assert {"cluster", "job"} <= labels, f"{expr.name}: {name} does not select $cluster and $job"


def test_the_node_variable_reads_a_series_that_carries_node_without_any_relabeling(dashboard: dict[str, Any]) -> None:
    node = next(v for v in dashboard["templating"]["list"] if v["name"] == "node")
    (metric, _labels), *_ = metric_selectors(node["query"]["query"].removeprefix("label_values(").rsplit(",", 1)[0])
    # onnxmon_runtime_info exposes `node` itself; the chart's relabeling gives it to every other series
    assert "node" in documented_metrics()[metric][1], f"{metric} has no node label in docs/metrics.md"


def test_every_query_panel_has_a_unit(dashboard: dict[str, Any]) -> None:
    for panel in query_panels(dashboard):
        assert panel["fieldConfig"]["defaults"].get("unit"), f"panel {panel['title']!r} has no unit"
    seconds = [p for p in query_panels(dashboard) if "_seconds" in p["targets"][0]["expr"] and p["type"] != "stat"]
    assert seconds and all(p["fieldConfig"]["defaults"]["unit"] == "s" for p in seconds)


def test_runbook_links_point_at_the_docs_of_this_version(dashboard: dict[str, Any]) -> None:
    version = yaml.safe_load((ROOT / "helm" / "onnxmon" / "Chart.yaml").read_text(encoding="utf-8"))["version"]
    base = f"https://github.com/onnxmon/onnxmon/blob/v{version}/docs/runbook.md"
    assert next(link for link in dashboard["links"] if link["title"] == "Runbook")["url"] == base
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8"), re.M)
    anchors = {h.strip().lower() for h in headings}
    panel_links = [link["url"] for panel in query_panels(dashboard) for link in panel.get("links", [])]
    assert len(panel_links) >= 4
    for url in panel_links:
        page, anchor = url.split("#")
        assert page == base and anchor in anchors, url


def test_selector_variables_appear_only_as_regex_matchers() -> None:
    text = "\n".join(e.expr for e in promql_expressions(substituted=False))
    for name in SELECTOR_VARIABLES:
        uses = len(re.findall(rf"\${{?{name}\b", text))
        as_matcher = len(re.findall(rf'=~"\${{?{name}}}?"', text))
        assert uses == as_matcher, f'${name} used outside a `label=~"${name}"` matcher'


def test_rows_are_status_deviation_environment_scheduler(dashboard: dict[str, Any]) -> None:
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Status", "Deviation", "Environment", "Scheduler", "Fleet"]


def test_error_ratio_panel_draws_the_tolerance_line_at_one(dashboard: dict[str, Any]) -> None:
    panel = next(p for p in query_panels(dashboard) if "onnxmon_output_error_over_tolerance" in p["targets"][0]["expr"])
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["custom"]["thresholdsStyle"]["mode"].startswith("line")
    assert [s["value"] for s in defaults["thresholds"]["steps"]] == [None, 1]


def test_max_abs_error_panel_is_on_a_log_scale(dashboard: dict[str, Any]) -> None:
    panel = next(p for p in query_panels(dashboard) if "onnxmon_output_max_abs_error" in p["targets"][0]["expr"])
    assert panel["fieldConfig"]["defaults"]["custom"]["scaleDistribution"] == {"type": "log", "log": 10}


def test_annotations_mark_environment_changes_and_baseline_promotions_at_the_time_they_carry(
    dashboard: dict[str, Any],
) -> None:
    # The change time is a value read from the store, so a restart onto a new stack (a new target
    # whose first sample already says "changed") is marked too; changes() of a counter would miss it.
    # Grafana's "series value as timestamp" takes milliseconds.
    annotations = {a["expr"].split("{")[0]: a for a in dashboard["annotations"]["list"] if "expr" in a}
    for metric in ("onnxmon_environment_changed_timestamp_seconds", "onnxmon_baseline_promoted_timestamp_seconds"):
        annotation = annotations[metric]
        assert annotation["useValueForTime"] is True
        assert annotation["expr"].endswith(" * 1000 > 0")
        assert "changes(" not in annotation["expr"]


def test_metrics_doc_defines_every_metric_of_the_issue_with_its_type_and_labels() -> None:
    documented = documented_metrics()
    for name, kind, labels in REQUIRED_METRICS:
        assert name in documented, f"{name} missing from docs/metrics.md"
        assert documented[name] == (kind, frozenset(labels)), name


def test_value_metrics_carry_no_unbounded_labels() -> None:
    bounded = {"model", "output", "reason", "verdict"}
    for name, (_kind, labels) in documented_metrics().items():
        if name.startswith("onnxmon_") and not name.endswith("_info"):
            assert labels <= bounded, f"{name} has labels {sorted(labels - bounded)}: ids and versions go on _info"


@pytest.mark.parametrize("expr", promql_expressions(), ids=lambda e: f"{e.kind}:{e.name}")
def test_expression_uses_only_documented_metrics_and_labels(expr: PromQLExpr) -> None:
    assert metric_selectors(expr.expr), f"no metric found in {expr.expr!r}"
    assert undocumented(expr.expr, documented_metrics()) == []


@pytest.mark.parametrize(
    ("expr", "selectors"),
    [
        ("up", [("up", set())]),
        ('up{job=~".*onnxmon.*"} == 0 or absent(up{job=~".*onnxmon.*"})', [("up", {"job"}), ("up", {"job"})]),
        (
            'sum by (model, reason) (increase(onnxmon_run_failures_total{model=~".*"}[6h])) > 0',
            [("onnxmon_run_failures_total", {"model"})],
        ),
        (
            "increase(a_total[1h]) and ignoring (output) (b_seconds > 60 <= 300)",
            [("a_total", set()), ("b_seconds", set())],
        ),
        ("time() - last_ts > 2 * interval_s offset 5m", [("last_ts", set()), ("interval_s", set())]),
        (
            'histogram_quantile(0.9, sum(rate(d_bucket{le!="+Inf"}[5m])) by (le))',
            [("d_bucket", {"le"})],
        ),
        ('label_replace(m, "dst", "$1", "src", "(.*)")', [("m", set())]),
        ('{__name__="named", model="x"}', [("named", {"model"})]),
        ("a * on (model) group_left (version) b_info", [("a", set()), ("b_info", set())]),
    ],
)
def test_metric_extractor_finds_selectors_and_skips_functions_keywords_and_label_lists(
    expr: str, selectors: list[tuple[str, set[str]]]
) -> None:
    assert metric_selectors(expr) == [(name, frozenset(labels)) for name, labels in selectors]


def test_an_undocumented_metric_or_label_is_reported() -> None:
    documented = documented_metrics()
    assert undocumented("rate(onnxmon_made_up_total[5m])", documented) == [
        "metric onnxmon_made_up_total is not in docs/metrics.md"
    ]
    assert undocumented('onnxmon_runs_total{gpu="0"}', documented) == [
        "onnxmon_runs_total has no label(s) ['gpu'] in docs/metrics.md"
    ]
    assert undocumented('onnxmon_run_duration_seconds_bucket{le="1", model="m"}', documented) == []


@pytest.mark.process
def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    promtool = need_binary("prometheus", "promtool")
    rules = [{"record": f"dashboard:expr_{i}", "expr": e.expr} for i, e in enumerate(promql_expressions())]
    path = tmp_path / "dashboard_exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


if __name__ == "__main__":
    for found in promql_expressions():
        sys.stdout.write(f"{found.kind}\t{found.name}\t{' '.join(found.expr.split())}\n")


# --------------------------------------------------------------------------- readable panels (issue 40)

KPS_VALUES = ROOT / "helm" / "onnxmon" / "values-kube-prometheus-stack.yaml"


def test_legends_name_the_node_never_a_pod_ip(dashboard: dict[str, Any]) -> None:
    legends = [t.get("legendFormat", "") for p in query_panels(dashboard) for t in p["targets"]]
    assert any("{{node}}" in legend for legend in legends)
    assert not [legend for legend in legends if "{{instance}}" in legend], "instance is a pod IP in Kubernetes"


def test_log_panels_draw_exact_zeros_at_a_floor_and_error_over_tolerance_is_one(dashboard: dict[str, Any]) -> None:
    logs = [
        p for p in query_panels(dashboard) if p["fieldConfig"]["defaults"].get("custom", {}).get("scaleDistribution")
    ]
    assert {p["title"] for p in logs} >= {"Error ÷ tolerance", "Max abs error (log)"}, "one spike crushes a linear axis"
    for panel in logs:
        assert panel["fieldConfig"]["defaults"]["custom"]["scaleDistribution"] == {"type": "log", "log": 10}
        assert "min" not in panel["fieldConfig"]["defaults"], "a log axis has no 0"
        for target in panel["targets"]:
            floor = re.fullmatch(r"clamp_min\((.+), ([0-9.e-]+)\)", target["expr"], re.S)
            assert floor and 0 < float(floor.group(2)) < 1, f"{panel['title']}: a 0 would vanish: {target['expr']}"


def test_the_grafana_folder_example_names_the_two_sidecar_values_it_needs() -> None:
    text = KPS_VALUES.read_text(encoding="utf-8")
    assert "grafana_folder:" in text
    assert "sidecar.dashboards.folderAnnotation: grafana_folder" in text
    assert "sidecar.dashboards.provider.foldersFromFilesStructure: true" in text
