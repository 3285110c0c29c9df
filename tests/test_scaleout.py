"""Scale-out: two ``onnxmon serve`` processes on one PostgreSQL, as a DaemonSet and as sharded replicas.

A DaemonSet runs one replica per node and every replica checks every model: each node keeps its
own history and its own state changes, and the API of any replica shows all nodes. Sharded
replicas split the models: a ``(model, slot)`` lease row makes every model run exactly once per
schedule interval across all replicas. Both are exercised with real processes, real checks and
a real PostgreSQL (a fresh schema, dropped afterwards).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor import capture
from monitor.config.plan import plan_for
from monitor.config.settings import Settings
from monitor.daemon import scheduler
from monitor.daemon.root import Daemon
from monitor.store import RunRecord, Store
from tests import modelzoo
from tests.databases import BACKENDS, database_url, postgres_schema
from tests.serving import free_port
from tests.workspace import Workspace

BIN = Path(sys.executable).parent
INTERVAL_S = 2.0


class Replica:
    """One ``onnxmon serve`` process with its own node and pod names, port and log file."""

    def __init__(self, ws: Workspace, *, pod: str, node: str | None = None) -> None:
        self.pod = pod
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in {"ONNXMON_NODE_NAME", "NODE_NAME", "POD_NAME"}}
        env["POD_NAME"] = pod
        if node is not None:
            env["ONNXMON_NODE_NAME"] = node
        self.log_path = ws.root / f"serve-{pod}.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(self.port)],
            cwd=ws.root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def get(self, path: str) -> tuple[int, Any]:
        """Status and decoded JSON body of ``GET path`` (0 when the server does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return 0, None

    def answers(self) -> bool:
        return self.get("/healthz")[0] == 200

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{self.pod} exited ({self.process.returncode}) waiting for {what}:\n{self.tail()}"
                )
            if condition():
                return
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what} on {self.pod}:\n{self.tail()}")

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self) -> int:
        """The exit code after SIGTERM; a replica that does not stop within a minute is killed."""
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)
        finally:
            self.log.close()

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def shared_db(postgres_url: str) -> Iterator[str]:
    """A URL of a fresh PostgreSQL schema that every replica of a test shares."""
    with postgres_schema(postgres_url) as url:
        yield url


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def deployment(ws: Workspace, url: str, mode: str, models: dict[str, int]) -> Settings:
    """A config of ``mode`` on ``url`` with classifiers checked every 2 s, baselines captured.

    ``models`` maps a model name to the classifier's seed; a name starting with ``drifted`` gets
    its weights perturbed after the capture, so every check of it fails.
    """
    for name, seed in models.items():
        model = modelzoo.classifier(seed=seed)
        ws.add_model(
            name, model, count=2, timeout=1.5, schedule={"interval": INTERVAL_S}, localize_on_fail=False, seed=seed
        )
    ws.extra["store"] = {"url": url, "baselines_dir": "baselines", "benchsets_dir": "benchsets"}
    ws.extra["daemon"] = {"mode": mode, "startup_spread": 0}
    settings = ws.settings()
    for name, seed in models.items():
        capture.capture_baseline(plan_for(settings, name))
        if name.startswith("drifted"):
            ws.replace_model(name, modelzoo.perturb_initializer(modelzoo.classifier(seed=seed), "w2", 0.5, index=3))
    upgrade = subprocess.run(
        [str(BIN / "onnxmon"), "db", "upgrade", "-c", str(ws.config_file)],
        cwd=ws.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    return settings


def run_side_by_side(replicas: list[Replica], until: Callable[[], bool], what: str, timeout: float) -> list[int]:
    """Wait for ``until`` while all replicas serve, then SIGTERM them together; their exit codes."""
    try:
        for replica in replicas:
            replica.wait_until(replica.answers, "/healthz")

        def all_alive_and_done() -> bool:
            for replica in replicas[1:]:
                if replica.process.poll() is not None:
                    raise AssertionError(f"{replica.pod} exited ({replica.process.returncode}):\n{replica.tail()}")
            return until()

        replicas[0].wait_until(all_alive_and_done, what, timeout)
    finally:
        for replica in replicas:
            replica.terminate()
    return [replica.wait() for replica in replicas]


# --- daemonset: every node runs every model and keeps its own history -----------------------------


@pytest.mark.slow
@pytest.mark.postgres
def test_two_daemonset_nodes_keep_their_own_history_and_either_api_shows_both(ws: Workspace, shared_db: str) -> None:
    deployment(ws, shared_db, "daemonset", {"clf": 0, "drifted": 1})
    nodes = {"node-a": "pod-a", "node-b": "pod-b"}
    replicas = [Replica(ws, node=node, pod=pod) for node, pod in nodes.items()]
    seen: dict[str, Any] = {}

    with Store(shared_db) as store:

        def three_runs_each() -> bool:
            counts = Counter((r.model, r.node) for m in ("clf", "drifted") for r in store.runs(m))
            if min((counts[(m, n)] for m in ("clf", "drifted") for n in nodes), default=0) < 3:
                return False
            # the API is read while both replicas still serve: either one shows both nodes
            for replica in replicas:
                seen[replica.pod] = {
                    query: replica.get(f"/api/v1/models/clf/runs?limit=500{query}")
                    for query in ("", "&node=node-a", "&node=node-b")
                } | {
                    "events": replica.get("/api/v1/events?model=drifted"),
                    "events-b": replica.get("/api/v1/events?model=drifted&node=node-b"),
                    "models": replica.get("/api/v1/models"),
                    "models-a": replica.get("/api/v1/models?node=node-a"),
                }
            return True

        codes = run_side_by_side(replicas, three_runs_each, "3 runs of each model on each node", timeout=60)
        assert codes == [0, 0], "both replicas exit 0 on SIGTERM"

        for model in ("clf", "drifted"):
            for node, pod in nodes.items():
                runs = store.runs(model, node=node, limit=1000)
                assert len(runs) >= 3
                assert {(r.node, r.pod) for r in runs} == {(node, pod)}, "every run carries its own node and pod"
            everything = store.runs(model, limit=1000)
            assert {r.node for r in everything} == set(nodes)
        verdicts = {(r.model, r.node): r.verdict.value for r in store.latest_per_model()}
        assert verdicts == {
            ("clf", "node-a"): "pass",
            ("clf", "node-b"): "pass",
            ("drifted", "node-a"): "fail",
            ("drifted", "node-b"): "fail",
        }, "the latest run is tracked per model and node"
        # State is per node: each node's first failing run is its own flip from nothing to fail;
        # with state shared across nodes the second node would see "already failing" and stay silent.
        flips = [(e.node, e.old, e.new) for e in store.events(model="drifted", kind="verdict_changed")]
        assert sorted(flips) == [("node-a", None, "fail"), ("node-b", None, "fail")]
        assert store.events(model="clf") == [], "a model passing on both nodes changes no state"

    for pod, answers in seen.items():
        status, body = answers[""]
        assert status == 200, body
        assert {(r["node"], r["pod"]) for r in body} == set(nodes.items()), f"{pod}'s API shows both nodes"
        for node, node_pod in nodes.items():
            status, body = answers[f"&node={node}"]
            assert status == 200, body
            assert body and {(r["node"], r["pod"]) for r in body} == {(node, node_pod)}, f"{pod}: ?node={node}"
        status, body = answers["events"]
        assert status == 200, body
        assert sorted(e["node"] for e in body if e["kind"] == "verdict_changed") == ["node-a", "node-b"]
        status, body = answers["events-b"]
        assert status == 200 and body and {e["node"] for e in body} == {"node-b"}, f"{pod}: events ?node="
        status, body = answers["models"]
        drifted = next(m for m in body if m["name"] == "drifted")
        assert {(n["node"], n["last_verdict"]) for n in drifted["nodes"]} == {("node-a", "fail"), ("node-b", "fail")}
        status, body = answers["models-a"]
        assert status == 200 and {n["node"] for m in body for n in m["nodes"]} == {"node-a"}, f"{pod}: models ?node="


# --- sharded: every model runs exactly once per interval across the replicas ---------------------


def leases(url: str) -> list[tuple[str, int, str, float]]:
    """Every ``(model, slot, holder, acquired_at)`` lease row of the schema behind ``url``."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        rows = conn.execute("SELECT model, slot, holder, acquired_at FROM leases ORDER BY model, slot").fetchall()
    return [(str(model), int(slot), str(holder), at.timestamp()) for model, slot, holder, at in rows]


def current_slot() -> int:
    """The schedule slot of now, as ``scheduler.slot_of`` numbers them for a 2 s interval."""
    return round((time.time() - scheduler.EPOCH.timestamp()) / INTERVAL_S)


def fire_time(slot: int) -> float:
    return scheduler.EPOCH.timestamp() + slot * INTERVAL_S


def busy_at(runs: list[RunRecord], pod: str, at: float) -> bool:
    """True when ``pod`` was still running one of ``runs`` at ``at``.

    The job ends a little after the child's ``finished_at`` (the result is still being recorded),
    hence half an interval of slack.
    """
    return any(
        r.pod == pod and r.started_at.timestamp() < at < r.finished_at.timestamp() + INTERVAL_S / 2 for r in runs
    )


@pytest.mark.slow
@pytest.mark.postgres
def test_sharded_replicas_run_every_model_exactly_once_per_interval(ws: Workspace, shared_db: str) -> None:
    models = ("alpha", "beta", "gamma")
    pods = ("pod-a", "pod-b")
    deployment(ws, shared_db, "sharded", {name: seed for seed, name in enumerate(models)})
    replicas = [Replica(ws, pod=pod) for pod in pods]
    # A replica's first check also starts its forkserver (ONNX Runtime imported from cold): on a
    # loaded machine it outlasts two intervals. The window checked for gaps opens once both
    # replicas have recorded a check.
    warm_from: list[int] = []

    with Store(shared_db) as store:

        def five_warm_slots_each() -> bool:
            if not warm_from:
                if {r.pod for m in models for r in store.runs(m)} == set(pods):
                    warm_from.append(current_slot() + 1)
                return False
            per_model = Counter(model for model, slot, _, _ in leases(shared_db) if slot >= warm_from[0])
            return all(per_model[m] >= 5 for m in models)

        codes = run_side_by_side(replicas, five_warm_slots_each, "5 warm slots of every model", timeout=90)
        assert codes == [0, 0], "both replicas exit 0 on SIGTERM"
        ran = {m: store.runs(m, limit=1000) for m in models}

    rows = leases(shared_db)
    held = Counter((model, holder) for model, _, holder, _ in rows)
    # Every lease is taken after its slot's fire time, never ahead: a job that started late must not
    # claim the next slot (its own would then run nowhere and the next one early).
    early = [
        (model, slot, round(at - fire_time(slot), 3)) for model, slot, _, at in rows if at < fire_time(slot) - 0.01
    ]
    assert early == [], "leases taken before their slot's fire time"
    done = Counter((r.model, r.pod) for runs in ran.values() for r in runs)
    # One holder per (model, slot) is the leases table's primary key; one run per lease is proven here.
    assert done == held, "each replica ran exactly the slots it holds, once each"
    lost: dict[str, int] = {}
    for model in models:
        window = {slot for m, slot, _, _ in rows if m == model and slot >= warm_from[0]}
        missing = sorted(set(range(warm_from[0], max(window) + 1)) - window)
        # A slot runs nowhere only when every replica is still busy with the model's previous runs
        # (max_instances=1): checks that outlast the interval, as on an overloaded machine.
        unexplained = [slot for slot in missing if not all(busy_at(ran[model], pod, fire_time(slot)) for pod in pods)]
        assert unexplained == [], f"{model}: slots {unexplained} ran nowhere with a replica idle: {sorted(window)}"
        lost[model] = len(missing)
        assert {r.node for r in ran[model]} == {None}, "no node name is set in a sharded deployment"
    split = Counter(pod for (_, pod), count in done.items() for _ in range(count))
    assert set(split) == set(pods), "both replicas share the work"
    print(f"sharded: {dict(split)}; slots skipped while every replica was busy: {lost}")


@pytest.mark.process
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sharded_daemon_skips_a_slot_another_replica_holds(
    ws: Workspace, backend: str, request: pytest.FixtureRequest
) -> None:
    ws.add_model("clf", modelzoo.classifier(), count=2, timeout="3s", schedule={"interval": "10m"})
    ws.extra["daemon"] = {"mode": "sharded"}
    settings = ws.settings()
    capture.capture_baseline(plan_for(settings, "clf"))
    now = [time.time()]
    with database_url(backend, ws.root, request) as url, Store(url) as store:
        store.upgrade()
        slot = scheduler.slot_of(settings, settings.model("clf"), now[0])
        assert store.claim("clf", slot, "pod-b")
        daemon = Daemon(settings, store=store, clock=lambda: now[0], pod="pod-a")
        try:
            daemon.scheduled_check("clf")
            assert store.runs("clf") == [], "pod-b holds this slot: pod-a does not run it"
            now[0] += 600
            daemon.scheduled_check("clf")
            assert [(r.pod, r.verdict.value) for r in store.runs("clf")] == [("pod-a", "pass")]
            assert not store.claim("clf", slot + 1, "pod-b"), "pod-a took the next slot"
        finally:
            daemon.stop()
