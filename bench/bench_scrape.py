"""The ``/metrics`` body, cached against uncached, side by side in one process over one real store.

Run:  .venv/bin/python bench/bench_scrape.py [--models 200] [--scrapes 15]

It builds ``--models`` copies of one tiny classifier (tests/modelzoo.py) with a shared benchmark
set, captures a baseline and runs one real check per model into a SQLite store, with the
registry, store and sinks wired as the daemon wires them (``tests.test_metrics.RealDaemon``).
Then it times ``exposition.render`` (what ``/metrics`` serves) and ``generate_latest`` (the
uncached rendering) interleaved: idle, and with one run landing (store row + counters) before
every scrape, and checks that both bodies are the same bytes each time.
``bench/bench_daemon.py`` measures the same scrape over HTTP from a real ``onnxmon serve``.
Goals: <= 50 ms median at 200 models, <= 150 ms at 1,000, idle and with runs landing.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client import generate_latest  # noqa: E402

from monitor import capture  # noqa: E402
from monitor.check import run_check  # noqa: E402
from monitor.config.plan import plan_for  # noqa: E402
from monitor.runtime import envsnap  # noqa: E402
from monitor.sinks.prometheus import exposition  # noqa: E402
from monitor.store import Store  # noqa: E402
from tests import modelzoo  # noqa: E402
from tests.test_metrics import RealDaemon  # noqa: E402
from tests.workspace import Workspace  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=200)
    parser.add_argument("--scrapes", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="onnxmon-bench-scrape-") as tmp:
        root = Path(tmp)
        ws = Workspace(root)
        names = [f"m{index:04d}" for index in range(args.models)]
        model = modelzoo.classifier()
        for name in names:
            modelzoo.save(model, root / "models" / f"{name}.onnx")
            ws.models[name] = {"name": name, "path": f"models/{name}.onnx", "benchset": "shared"}
        generate = {"model": f"models/{names[0]}.onnx", "count": 2, "seed": 0, "dims": {"batch": 2}}
        ws.benchsets["shared"] = {"name": "shared", "generate": generate}
        settings = ws.settings()
        snapshot = envsnap.capture()
        began = time.monotonic()
        with Store(f"sqlite:///{root / 'history.db'}") as store:
            store.upgrade()
            daemon = RealDaemon(settings, store, startup_env=snapshot.to_dict())
            results = []
            for name in names:
                capture.capture_baseline(plan_for(settings, name), capture_env=lambda: snapshot)
                results.append(daemon.dispatch(run_check(plan_for(settings, name), capture_env=lambda: snapshot)))
            print(f"{args.models} models, one check each, in {time.monotonic() - began:.1f} s", flush=True)
            return _measure(daemon, results, args.models, args.scrapes)


def _measure(daemon: RealDaemon, results: list, models: int, scrapes: int) -> int:  # type: ignore[type-arg]
    timings: dict[str, list[float]] = {"cached idle": [], "uncached idle": [], "cached, run landed": [],
                                       "uncached, run landed": []}  # fmt: skip
    exposition.render(daemon.registry, "")  # the first scrape fills the pieces
    body = b""
    for index in range(2 * scrapes):
        landed = index >= scrapes
        if landed:  # a run lands between two scrapes, as during a wave of checks
            result = results[(index * 37) % len(results)]
            later = result.finished_at + 100 + index
            daemon.dispatch(dataclasses.replace(result, started_at=later - 1, finished_at=later))
        began = time.perf_counter()
        body, _ = exposition.render(daemon.registry, "")
        cached = time.perf_counter() - began
        began = time.perf_counter()
        fresh = generate_latest(daemon.registry)
        uncached = time.perf_counter() - began
        if body != fresh:
            raise SystemExit("the cached body differs from generate_latest's")
        suffix = "run landed" if landed else "idle"
        timings[f"cached, {suffix}" if landed else "cached idle"].append(cached)
        timings[f"uncached, {suffix}" if landed else "uncached idle"].append(uncached)
    print(f"{models} models, body {len(body) / 1024:.0f} KiB, median of {scrapes} interleaved scrapes each")
    for label, values in timings.items():
        print(f"  {label:<22} {statistics.median(values) * 1000:8.1f} ms")
    goal = 0.050 if models <= 200 else 0.150
    worst = max(statistics.median(timings["cached idle"]), statistics.median(timings["cached, run landed"]))
    for idle, busy in (("uncached idle", "cached idle"), ("uncached, run landed", "cached, run landed")):
        print(f"  ratio {busy} / {idle}: {statistics.median(timings[busy]) / statistics.median(timings[idle]):.3f}")
    print(f"goal: cached median <= {goal * 1000:.0f} ms: {'met' if worst <= goal else 'MISSED'}")
    return 0 if worst <= goal else 1


if __name__ == "__main__":
    raise SystemExit(main())
