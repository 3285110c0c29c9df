"""The ``/metrics`` scrape at ``--models`` models: its median time, and side by side with another tree's.

Run:  .venv/bin/python bench/bench_scrape.py [--models 200] [--scrapes 15] [--rounds 3] [--against REV]

It builds ``--models`` copies of one tiny classifier (tests/modelzoo.py) with a shared benchmark
set, captures a baseline and runs one real check per model into a SQLite store, with the
registry, store and sinks wired as the daemon wires them (``tests.test_metrics.RealDaemon``).
Then a child process per tree opens a copy of that store, wires a ``RealDaemon`` over it and
times ``GET /metrics`` on the daemon's own app (``create_app`` under a test client: what a
scraper gets, without the socket): idle, with one run landing (store row + counters) before
every scrape, and idle with the Accept header Prometheus sends (OpenMetrics, its first choice).

``--against REV`` measures the tree of git revision ``REV`` (``git archive``, into a temporary
folder) the same way, alternating with this tree over ``--rounds`` rounds, prints the ratio of
the medians (this tree / REV's), and compares the two trees' first bodies: the same families,
HELP, TYPE, series and values, but for the process's own figures (start time, CPU, memory).
``bench/bench_daemon.py`` measures the scrape over HTTP from a real ``onnxmon serve``.
Each kind is also timed in the child's CPU seconds, which cores shared with other work inflate far less.
Goal: median <= 50 ms up to 200 models, <= 150 ms at 1,000, in each kind (exit 1 when missed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOALS_S = {200: 0.050, 1000: 0.150}  # up to that many models: the median scrape
# differ between any two processes: the process's start time and its own CPU, memory and start
PROCESS_START = ("onnxmon_config_last_reload_success_timestamp_seconds", "process_")
KINDS = ("idle", "run landed", "OpenMetrics")
CPU = ("idle, CPU", "landed, CPU", "OpenM., CPU")  # the child's CPU time per scrape: contention inflates it far less
# what Prometheus 3 sends by default (OpenMetrics first): the body a real scrape gets
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;"
    "version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="a git revision to measure side by side with this tree")
    parser.add_argument("--child", nargs=3, metavar=("TREE", "WORKSPACE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tree, workspace, out = (Path(p) for p in args.child)
        return _child(tree, workspace, out, args.scrapes)
    with tempfile.TemporaryDirectory(prefix="onnxmon-bench-scrape-") as tmp:
        root = Path(tmp)
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = _export(args.against, root / "against")
        _prepare(root / "workspace", args.models)
        return _compare(trees, root, args)


def _export(revision: str, into: Path) -> Path:
    """The files of ``revision`` (``git archive``), nothing else."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _prepare(root: Path, models: int) -> None:
    """The workspace, baselines and store every child reads (built with this tree's code)."""
    sys.path.insert(0, str(ROOT))
    from monitor import capture
    from monitor.check import run_check
    from monitor.config.plan import plan_for
    from monitor.runtime import envsnap
    from monitor.store import Store
    from tests import modelzoo
    from tests.test_metrics import RealDaemon
    from tests.workspace import Workspace

    began = time.monotonic()
    ws = Workspace(root)
    names = [f"m{index:04d}" for index in range(models)]
    model = modelzoo.classifier()
    for name in names:
        modelzoo.save(model, root / "models" / f"{name}.onnx")
        ws.models[name] = {"name": name, "path": f"models/{name}.onnx", "benchset": "shared"}
    generate = {"model": f"models/{names[0]}.onnx", "count": 2, "seed": 0, "dims": {"batch": 2}}
    ws.benchsets["shared"] = {"name": "shared", "generate": generate}
    settings = ws.settings()
    snapshot = envsnap.capture()
    (root / "environment.json").write_text(json.dumps(snapshot.to_dict()), encoding="utf-8")
    with Store(f"sqlite:///{root / 'history.db'}") as store:
        store.upgrade()
        daemon = RealDaemon(settings, store, startup_env=snapshot.to_dict())
        for name in names:
            capture.capture_baseline(plan_for(settings, name), capture_env=lambda: snapshot)
            daemon.dispatch(run_check(plan_for(settings, name), capture_env=lambda: snapshot))
    print(f"{models} models, one check each, in {time.monotonic() - began:.1f} s", flush=True)


def _compare(trees: dict[str, Path], root: Path, args: argparse.Namespace) -> int:
    timings: dict[str, dict[str, list[float]]] = {label: {kind: [] for kind in (*KINDS, *CPU)} for label in trees}
    bodies: dict[str, str] = {}
    order = list(trees)
    for round_ in range(args.rounds):
        for label in order if round_ % 2 == 0 else order[::-1]:  # alternate who goes first
            run = root / f"run-{round_}-{len(bodies)}-{order.index(label)}"
            shutil.copytree(root / "workspace", run)
            out = run / "out.json"
            command = [
                sys.executable,
                "-W",
                "ignore::DeprecationWarning",
                str(Path(__file__).resolve()),
                "--scrapes",
                str(args.scrapes),
            ]
            subprocess.run([*command, "--child", str(trees[label]), str(run), str(out)], check=True, cwd=trees[label])
            found = json.loads(out.read_text(encoding="utf-8"))
            for kind in (*KINDS, *CPU):
                timings[label][kind].extend(found[kind])
            bodies.setdefault(label, found["body"])
            shutil.rmtree(run)
    size = len(bodies["this tree"].encode()) / 1024
    print(f"{args.models} models, body {size:.0f} KiB, median of {args.rounds} x {args.scrapes} scrapes per tree")
    print(f"  {'':<13}" + "".join(f"{label:>14}" for label in trees))
    medians = {
        label: {kind: statistics.median(values) for kind, values in kinds.items()} for label, kinds in timings.items()
    }
    for kind in (*KINDS, *CPU):
        print(f"  {kind:<13}" + "".join(f"{medians[label][kind] * 1000:11.1f} ms" for label in trees))
    if args.against:
        other = medians[args.against]
        ratios = ", ".join(f"{kind} {medians['this tree'][kind] / other[kind]:.2f}" for kind in (*KINDS, *CPU))
        print(f"  ratio this tree / {args.against}: {ratios}")
        differ = _differences(bodies["this tree"], bodies[args.against])
        but = ", ".join(PROCESS_START)
        print(f"  same series, HELP and TYPE as {args.against} (but {but}): {'yes' if not differ else 'NO'}")
        for line in differ[:20]:
            print(f"    {line}")
    worst = max(medians["this tree"][kind] for kind in KINDS)
    goal = next((limit for models, limit in GOALS_S.items() if args.models <= models), max(GOALS_S.values()))
    print(f"goal: this tree's median <= {goal * 1000:.0f} ms: {'met' if worst <= goal else 'MISSED'}")
    return 0 if worst <= goal else 1


def _differences(mine: str, theirs: str) -> list[str]:
    """The lines only one body has (sorted, ``-`` theirs, ``+`` mine), the process's own figures left out."""
    kept = [{line for line in body.splitlines() if not line.startswith(PROCESS_START)} for body in (mine, theirs)]
    return sorted([f"+ {line}" for line in kept[0] - kept[1]] + [f"- {line}" for line in kept[1] - kept[0]])


def _child(tree: Path, workspace: Path, out: Path, scrapes: int) -> int:
    """Time ``GET /metrics`` of ``tree``'s code over ``workspace`` (its store copy): idle, then runs landing."""
    sys.path.insert(0, str(tree))
    import dataclasses

    from fastapi.testclient import TestClient

    from monitor.api.app import create_app
    from monitor.check import run_check
    from monitor.config import settings
    from monitor.config.plan import plan_for
    from monitor.runtime import envsnap
    from monitor.store import Store
    from tests.test_metrics import RealDaemon

    assert Path(sys.modules["monitor"].__file__ or "").is_relative_to(tree), "the child imported another tree"
    loaded = settings.load(workspace / "onnxmon.yaml", environ={})
    environment: dict[str, Any] = json.loads((workspace / "environment.json").read_text(encoding="utf-8"))
    with Store(f"sqlite:///{workspace / 'history.db'}") as store:
        daemon = RealDaemon(loaded, store, startup_env=environment)
        client = TestClient(create_app(daemon))
        first = client.get("/metrics").text
        snapshot = envsnap.capture()
        result = run_check(plan_for(loaded, loaded.models[0].name), capture_env=lambda: snapshot)
        found: dict[str, Any] = {"body": first, **{kind: [] for kind in (*KINDS, *CPU)}}
        for index in range(3 * scrapes):
            kind = index // scrapes
            if kind == 1:  # a run lands between two scrapes, as during a wave of checks
                later = result.finished_at + 100 + index
                daemon.dispatch(dataclasses.replace(result, started_at=later - 1, finished_at=later))
            headers = {"accept": PROMETHEUS_ACCEPT} if kind == 2 else {}
            began, cpu = time.perf_counter(), time.process_time()
            response = client.get("/metrics", headers=headers)
            found[KINDS[kind]].append(time.perf_counter() - began)
            found[CPU[kind]].append(time.process_time() - cpu)
            assert response.status_code == 200
    out.write_text(json.dumps(found), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
