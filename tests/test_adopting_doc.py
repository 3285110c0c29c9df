"""docs/adopting.md stays true: its kube-prometheus-stack values are the tested values file, and
every chart value it names exists (the file itself is rendered and validated in tests/test_helm.py)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.chart import CHART, ROOT


def test_the_adoption_page_shows_the_kube_prometheus_stack_values_file_verbatim() -> None:
    page = (ROOT / "docs" / "adopting.md").read_text(encoding="utf-8")
    example = (CHART / "values-kube-prometheus-stack.yaml").read_text(encoding="utf-8")
    lines = example.splitlines(keepends=True)
    body = "".join(lines[next(i for i, line in enumerate(lines) if not line.startswith("#")) :])  # no header
    blocks = re.findall(r"```yaml\n(.*?)```", page, re.DOTALL)
    assert body in blocks, "docs/adopting.md's values block differs from values-kube-prometheus-stack.yaml"


def test_the_adoption_page_names_only_values_the_chart_has() -> None:
    page = (ROOT / "docs" / "adopting.md").read_text(encoding="utf-8")
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    named = r"`((?:serviceMonitor|podMonitor|prometheusRule|grafanaDashboard)\.[A-Za-z.]+)`"
    for dotted in sorted(set(re.findall(named, page))):
        node: Any = values["monitoring"]
        for part in dotted.split("."):
            assert isinstance(node, dict) and part in node, f"docs/adopting.md names `{dotted}`, not in values.yaml"
            node = node[part]
