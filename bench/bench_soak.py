"""Soak test: a real ``onnxmon serve`` runs ~1,000 scheduled check cycles; does it leak memory or fds?

Run:  .venv/bin/python bench/bench_soak.py [--cycles 1000] [--models 4] [--interval 2s] [--warmup 100]

It writes a throwaway workspace (``--models`` tiny classifiers, each with a captured baseline,
scheduled every ``--interval``), starts the daemon exactly as production does (``onnxmon serve``
in its own process, checks isolated in forkserver children), and samples from ``/proc`` every
few seconds: the daemon's resident memory (VmRSS), its open file descriptors and threads, and
the RSS of its direct children (the forkserver). A *cycle* is one recorded check, counted from
``onnxmon_runs_total`` on ``/metrics`` (so the HTTP server is scraped the whole time, too).

The first ``--warmup`` cycles are excluded (imports, allocator arenas, the forkserver and the
first sessions settle there). The goals, checked at the end: RSS growth after warm-up < 5 %,
no growth in open fds, every check passes, and SIGTERM exits 0. Exits 1 when a goal is missed.
With ``--json PATH`` the samples and the summary are written for the record, and
``--summarize PATH`` re-reads such a file and prints its summary without running anything.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor import capture  # noqa: E402
from monitor.config.plan import plan_for  # noqa: E402
from tests import modelzoo  # noqa: E402
from tests.workspace import Workspace  # noqa: E402

BIN = Path(sys.executable).parent
RSS_GROWTH_GOAL = 0.05
WINDOW = 10  # samples per comparison window


@dataclass(frozen=True)
class Sample:
    """One look at the daemon from outside."""

    elapsed_s: float
    cycles: int
    failures: int
    rss_kib: int
    fds: int
    threads: int
    children_rss_kib: int


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000, help="recorded checks to run in all")
    parser.add_argument("--warmup", type=int, default=100, help="cycles excluded from the growth figures")
    parser.add_argument("--models", type=int, default=4, help="tiny models, each on its own schedule")
    parser.add_argument("--interval", default="2s", help="schedule interval of every model")
    parser.add_argument("--timeout", default="1.5s", help="check timeout (must be shorter than the interval)")
    parser.add_argument("--sample-every", type=float, default=2.0, help="seconds between /proc samples")
    parser.add_argument("--json", type=Path, default=None, help="write samples and summary here")
    parser.add_argument("--summarize", type=Path, default=None, help="only re-read a --json file and summarize it")
    args = parser.parse_args(argv)
    if args.summarize:
        recorded = json.loads(args.summarize.read_text())
        samples = [Sample(**s) for s in recorded["samples"]]
        summary = _summary(samples, args.warmup, int(recorded["summary"]["sigterm_exit_code"]))
        _print(samples, summary)
        return 0 if summary["goals_met"] else 1
    if args.warmup >= args.cycles:
        parser.error("--warmup must be smaller than --cycles")

    with tempfile.TemporaryDirectory(prefix="onnxmon-soak-") as tmp:
        workspace = _workspace(Path(tmp), args.models, args.interval, args.timeout)
        samples, exit_code = _soak(workspace, args.cycles, args.warmup, args.sample_every)
    summary = _summary(samples, args.warmup, exit_code)
    _print(samples, summary)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"samples": [asdict(s) for s in samples], "summary": summary}, indent=2))
    return 0 if summary["goals_met"] else 1


def _workspace(root: Path, models: int, interval: str, timeout: str) -> Workspace:
    """``models`` tiny classifiers with a baseline each, scheduled every ``interval``."""
    ws = Workspace(root)
    for index in range(models):
        ws.add_model(
            f"clf{index}",
            modelzoo.classifier(seed=index),
            count=2,
            timeout=timeout,
            schedule={"interval": interval},
        )
    ws.extra["daemon"] = {"startup_spread": 0, "workers": 2}
    settings = ws.settings()
    for index in range(models):
        capture.capture_baseline(plan_for(settings, f"clf{index}"))
    return ws


def _soak(ws: Workspace, cycles: int, warmup: int, every: float) -> tuple[list[Sample], int]:
    port = _free_port()
    log_path = ws.root / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(BIN / "onnxmon"), "serve", "-c", str(ws.config_file), "--port", str(port), "--log-level", "warning"],
            cwd=ws.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        began = time.monotonic()
        samples: list[Sample] = []
        try:
            while True:
                if process.poll() is not None:
                    raise SystemExit(
                        f"daemon exited early ({process.returncode}); log:\n{log_path.read_text()[-4000:]}"
                    )
                scraped = _scrape(port)
                if scraped is not None:
                    sample = _look(process.pid, time.monotonic() - began, *scraped)
                    samples.append(sample)
                    if len(samples) % 15 == 0:
                        print(f"  {sample.cycles:5d} cycles  rss {sample.rss_kib} KiB  fds {sample.fds}", flush=True)
                    if sample.cycles >= cycles:
                        break
                time.sleep(every)
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            exit_code = process.wait(120)
    return samples, exit_code


def _scrape(port: int) -> tuple[int, int] | None:
    """(recorded runs, failed runs) summed over models, from ``/metrics``; None while not up."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    runs = failures = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "onnxmon_runs_total":
                runs += int(sample.value)
            elif sample.name == "onnxmon_run_failures_total":
                failures += int(sample.value)
    return runs, failures


def _look(pid: int, elapsed: float, cycles: int, failures: int) -> Sample:
    status = _status(pid)
    children = {int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in _children(task)}
    children_rss = 0
    for child in children:
        try:
            children_rss += _status(child)["VmRSS"]
        except (OSError, KeyError):
            continue  # a check child that exited between the two reads
    return Sample(
        elapsed_s=round(elapsed, 1),
        cycles=cycles,
        failures=failures,
        rss_kib=status["VmRSS"],
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=status["Threads"],
        children_rss_kib=children_rss,
    )


def _children(task: Path) -> list[str]:
    try:
        return (task / "children").read_text().split()
    except OSError:
        return []  # a thread that ended between listing and reading


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "Threads"):
            fields[key] = int(rest.split()[0])
    return fields


def _summary(samples: list[Sample], warmup: int, exit_code: int) -> dict[str, object]:
    """Growth from the first window past warm-up to the last window, and the trend in between.

    RSS: medians of each window damp allocator noise, and a least-squares slope over every
    sample past warm-up shows a slow leak that a 5 % threshold would hide. Fds: a check in
    flight holds a few pipes for a moment (17, 20 or 23 here), so the *resting* count, the
    minimum over each half of the run, is what must not grow.
    """
    after = [s for s in samples if s.cycles >= warmup]
    if len(after) < 4:
        raise SystemExit(f"too few samples after warm-up ({len(after)}); sample more often or run longer")
    window = max(2, min(WINDOW, len(after) // 3))
    first, last = after[:window], after[-window:]
    half = len(after) // 2
    rss_warm = statistics.median(s.rss_kib for s in first)
    rss_end = statistics.median(s.rss_kib for s in last)
    fds_warm, fds_end = min(s.fds for s in after[:half]), min(s.fds for s in after[half:])
    growth = (rss_end - rss_warm) / rss_warm
    slope = statistics.linear_regression([s.cycles for s in after], [s.rss_kib for s in after]).slope
    end = samples[-1]
    seconds = end.elapsed_s
    return {
        "cycles": end.cycles,
        "failed_checks": end.failures,
        "wall_s": seconds,
        "cycles_per_s": round(end.cycles / seconds, 2) if seconds else None,
        "rss_warm_kib": rss_warm,
        "rss_end_kib": rss_end,
        "rss_max_kib": max(s.rss_kib for s in after),
        "rss_growth_pct": round(100 * growth, 2),
        "rss_slope_kib_per_100_cycles": round(100 * slope, 1),
        "fds_resting_warm": fds_warm,
        "fds_resting_end": fds_end,
        "fds_max": max(s.fds for s in after),
        "threads_warm": min(s.threads for s in first),
        "threads_end": min(s.threads for s in last),
        "children_rss_warm_kib": statistics.median(s.children_rss_kib for s in first),
        "children_rss_end_kib": statistics.median(s.children_rss_kib for s in last),
        "sigterm_exit_code": exit_code,
        "goals_met": growth < RSS_GROWTH_GOAL and fds_end <= fds_warm and end.failures == 0 and exit_code == 0,
    }


def _print(samples: list[Sample], summary: dict[str, object]) -> None:
    print(f"{'cycles':>7} {'elapsed_s':>9} {'rss_kib':>9} {'fds':>4} {'threads':>7} {'children_kib':>12}")
    step = max(1, len(samples) // 12)
    for s in [*samples[::step], samples[-1]]:
        print(f"{s.cycles:7d} {s.elapsed_s:9.1f} {s.rss_kib:9d} {s.fds:4d} {s.threads:7d} {s.children_rss_kib:12d}")
    for key, value in summary.items():
        print(f"{key:>28}: {value}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    sys.exit(main())
