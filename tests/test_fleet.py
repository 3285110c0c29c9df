"""The fleet vote (monitor/fleet/, docs/fleet.md) over a real store: groups, quorum, modes, outliers, attribution.

The runs are values as a check records them (digests, stack, spread), written to a real SQLite history;
what the vote must find is set up by construction: which node got which digest, on which stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.compare.digest import run_digest
from monitor.config.settings import Settings, from_mapping
from monitor.fleet import own, report
from monitor.results import AppliedTolerance, CheckResult, OutputDigest, OutputMetrics, OutputStats, Verdict
from monitor.runtime import stackkey
from monitor.store import Store
from tests.conftest import onnxmon

NOW = datetime.now(UTC).replace(microsecond=0)
GOOD = tuple(f"{i:032x}" for i in range(4))
STACK = {
    "onnxruntime.version": "1.32.0",
    "onnxruntime.build_info": "git-branch=rel-1.32.0",
    "session.providers": "CPUExecutionProvider",
    "session.provider_options": "{}",
    "session.options": '{"deterministic_compute":false,"intra_op_num_threads":1}',
    "model.sha256": "a" * 64,
    "cpu.model": "AMD EPYC",
}


def check(
    model: str = "m",
    samples: Sequence[str] = GOOD,
    stack: Mapping[str, str] = STACK,
    *,
    at: datetime = NOW,
    spread: float | None = None,
    total: float = 100.0,
) -> CheckResult:
    digest = OutputDigest("y", tuple(samples), total=total, magnitude=10.0, elements=400)
    metrics = OutputMetrics(element_count=400, nondeterminism_max_abs=spread)
    output = OutputStats("y", Verdict.PASS, metrics, AppliedTolerance(atol=1e-5, rtol=1e-4), dtype="float32")
    return CheckResult(
        model,
        Verdict.PASS,
        at.timestamp(),
        at.timestamp() + 1,
        outputs=(output,),
        digests=(digest,),
        run_digest=run_digest((digest,)),
        stack=dict(stack),
        stack_key=stackkey.key_of(stack),
    )


def odd(sample: int) -> tuple[str, ...]:
    return tuple("f" * 32 if i == sample else s for i, s in enumerate(GOOD))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(f"sqlite:///{tmp_path / 'history.db'}") as s:
        s.upgrade()
        yield s


SETTINGS = from_mapping({}, origin=Path("/nonexistent/onnxmon.yaml"))


def record(store: Store, runs: Mapping[str, CheckResult]) -> None:
    for node, result in runs.items():
        store.record_run(result, node=node)


def only(store: Store, settings: Settings = SETTINGS) -> dict[str, object]:
    (vote,) = report.vote(store, settings, NOW + timedelta(seconds=5))
    return report.document(vote)


def test_one_odd_digest_among_five_nodes_is_outvoted_naming_its_sample(store: Store) -> None:
    record(store, {f"n{i}": check() for i in range(4)} | {"n4": check(samples=odd(2))})
    document = only(store)
    (group,) = document["groups"]  # type: ignore[misc]
    assert group["nodes"] == ["n0", "n1", "n2", "n3", "n4"] and group["mode"] == "exact" and group["quorum"]
    assert group["digest"] == check().run_digest
    (outlier,) = document["outliers"]  # type: ignore[misc]
    assert (outlier["node"], outlier["kind"], outlier["samples"]) == ("n4", "outvoted", [2])
    assert document["separated_by"] == [] and document["consistent"] is False


def test_no_quorum_no_outlier(store: Store) -> None:
    record(store, {"n0": check(), "n1": check(samples=odd(0))})  # two nodes: under min_nodes
    assert only(store)["outliers"] == []
    record(store, {"n2": check(), "n3": check(samples=odd(1))})  # 2 of 4: not more than half
    document = only(store)
    assert document["outliers"] == [] and document["groups"][0]["quorum"] is False  # type: ignore[index]
    record(store, {"n4": check()})  # 3 of 5
    assert [o["node"] for o in only(store)["outliers"]] == ["n1", "n3"]  # type: ignore[attr-defined]


def test_a_node_on_another_release_that_computes_differently_is_a_stack_outlier(store: Store) -> None:
    old = STACK | {"onnxruntime.version": "1.20.1", "onnxruntime.build_info": "git-branch=rel-1.20.1"}
    record(store, {f"n{i}": check() for i in range(4)} | {"old": check(samples=odd(1), stack=old)})
    document = only(store)
    assert [len(g["nodes"]) for g in document["groups"]] == [4, 1]  # type: ignore[attr-defined]
    (outlier,) = document["outliers"]  # type: ignore[misc]
    assert (outlier["node"], outlier["kind"], outlier["group"]) == ("old", "stack", 2)
    assert "onnxruntime.version 1.32.0 vs 1.20.1" in outlier["detail"]
    assert document["separated_by"][0] == "onnxruntime.version"  # type: ignore[index]
    record(store, {"old": check(stack=old)})  # the other release computes the same bits: no outlier
    assert only(store)["outliers"] == [] and only(store)["separated_by"][0] == "onnxruntime.version"  # type: ignore[index]


def test_a_group_with_spread_is_voted_within_tolerance_against_its_medoid(store: Store) -> None:
    # 400 elements, atol 1e-5, rtol 1e-4, ||b|| 10: the bound on the sums is 400e-5 + 1e-4*20*10 = 0.024
    nodes = {f"n{i}": check(samples=odd(i % 4), spread=1e-6, total=100.0 + 0.001 * i) for i in range(5)}
    record(store, nodes | {"far": check(samples=odd(3), spread=1e-6, total=100.5)})
    document = only(store)
    (group,) = document["groups"]  # type: ignore[misc]
    assert group["mode"] == "tolerance" and "spread" in group["why"]
    assert [(o["node"], o["kind"]) for o in document["outliers"]] == [("far", "outvoted")]  # type: ignore[attr-defined]


def test_a_comparability_finding_names_the_setting_and_its_fix(store: Store) -> None:
    cuda = STACK | {"session.providers": "CUDAExecutionProvider,CPUExecutionProvider"}
    record(store, {f"n{i}": check(stack=cuda) for i in range(3)})
    (group,) = only(store)["groups"]  # type: ignore[misc]
    codes = {f["code"]: f["fix"] for f in group["findings"]}
    assert group["mode"] == "tolerance" and "EXHAUSTIVE" in group["why"]
    assert "cudnn_conv_algo_search: DEFAULT" in codes["cudnn_conv_algo_search"]
    assert "deterministic_compute: true" in codes["deterministic_compute"]


@pytest.mark.parametrize(
    ("again", "kind"),
    [
        (GOOD, "transient"),  # the re-run computes what the majority did: a one-time difference
        (odd(2), "suspect_hardware"),  # the same odd result again
        ((*GOOD[:2], "e" * 32, *GOOD[3:]), "suspect_hardware"),  # another odd result: still not the peers'
    ],
)
def test_an_outvoted_node_is_attributed_by_its_re_run(store: Store, again: tuple[str, ...], kind: str) -> None:
    record(store, {f"n{i}": check() for i in range(4)} | {"n4": check(samples=odd(2))})
    asked: list[list[int]] = []

    def rerun(samples: Sequence[int]) -> dict[str, dict[int, str]]:
        asked.append(list(samples))
        return {"y": {i: again[i] for i in samples}}

    own.vote_own(store, SETTINGS, "m", "n4", NOW, rerun)
    assert asked == [[2]]
    (outlier,) = only(store)["outliers"]  # type: ignore[misc]
    assert outlier["kind"] == kind
    assert ("dcgmi diag -r 3" in outlier["detail"]) is (kind == "suspect_hardware")
    assert only(store)["consistent"] is (kind == "transient")
    own.vote_own(store, SETTINGS, "m", "n0", NOW, rerun)  # a peer's vote leaves n4's finding alone
    assert only(store)["outliers"][0]["kind"] == kind  # type: ignore[index]
    record(store, {"n4": check(at=NOW + timedelta(seconds=1))})
    own.vote_own(store, SETTINGS, "m", "n4", NOW, rerun)
    assert only(store)["outliers"] == [] and asked == [[2]]


def test_runs_older_than_max_age_take_no_part(store: Store) -> None:
    record(store, {f"n{i}": check() for i in range(3)} | {"gone": check(samples=odd(0), at=NOW - timedelta(days=3))})
    assert only(store)["outliers"] == [] and "gone" not in only(store)["groups"][0]["nodes"]  # type: ignore[index]


def test_the_fleet_command_prints_json_and_exits_1_while_an_outlier_stands(store: Store, tmp_path: Path) -> None:
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump({"store": {"url": str(store.engine.url)}}))
    record(store, {f"n{i}": check() for i in range(3)})
    done = onnxmon("fleet", "-o", "json", "-c", config)
    assert done.exit_code == 0, done.output
    record(store, {"n3": check(), "n4": check(samples=odd(3))})
    done = onnxmon("fleet", "m", "-o", "json", "-c", config)
    assert done.exit_code == 1, done.output
    (printed,) = json.loads(done.stdout)
    assert printed["outliers"][0]["node"] == "n4" and printed["groups"][0]["nodes"] == ["n0", "n1", "n2", "n3", "n4"]
    table = onnxmon("fleet", "-c", config)
    assert table.exit_code == 1 and "n4 outvoted" in table.stdout
    assert onnxmon("fleet", "nosuch", "-c", config).exit_code != 0


def test_the_api_the_page_and_a_daemon_vote_show_the_odd_node(store: Store, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient
    from prometheus_client import CollectorRegistry, generate_latest

    from monitor.api.app import create_app
    from monitor.daemon import fleetvote
    from monitor.sinks.prometheus.fleet_gauges import FleetGauges
    from tests.test_metrics import RealDaemon

    record(store, {f"n{i}": check() for i in range(4)})
    odd_run = store.record_run(check(samples=odd(1)), node="n4")
    client = TestClient(create_app(RealDaemon(SETTINGS, store)), raise_server_exceptions=False)
    (document,) = client.get("/api/v1/fleet").json()
    assert [(o["node"], o["kind"]) for o in document["outliers"]] == [("n4", "outvoted")]
    assert client.get("/api/v1/fleet", params={"model": "other"}).json() == []
    page = client.get("/fleet").text
    assert "n4" in page and "1 outvoted" in page and "every node agrees" not in page
    # each daemon votes for its own node (fleet.rerun off: no model file here to re-run) and sets its series
    settings = from_mapping({"fleet": {"rerun": False}}, origin=Path("/nonexistent/onnxmon.yaml"))
    plan_like: Any = type("Plan", (), {"name": "m", "timeout_s": 10.0})()
    series = {}
    for node, run_id in (("n4", odd_run), ("n0", 1)):
        registry = CollectorRegistry()
        fleetvote.after_check(
            plan_like, check(), run_id, settings=settings, store=store, node=node, gauges=FleetGauges(registry)
        )
        text = generate_latest(registry).decode()
        series[node] = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if "{" in line}
    assert series["n4"] == {'onnxmon_fleet_consistent{model="m"}': 0.0, 'onnxmon_fleet_group{model="m"}': 1.0}
    assert series["n0"] == {'onnxmon_fleet_consistent{model="m"}': 1.0, 'onnxmon_fleet_group{model="m"}': 1.0}
