"""What ``checks.concurrency: 4`` adds to a check, on corpus models: ``run_check`` with and without it.

Run:  .venv/bin/python bench/bench_concurrency.py [--models torch-cnn-legacy,vietcombank-captcha,silero-vad]
          [--rounds 7] [--samples 8] [--threads 4]

Per model, one benchmark set and one baseline; the two variants run interleaved in one process
(these machines are noisy: only ratios measured side by side mean anything), each a whole
``run_check`` with a fresh session, lint off in both:

- plain:       the serial replay and the comparison;
- concurrency: the same, then the set from ``--threads`` threads through the same session (each
  sample 3 times, a barrier per round) against the serial answers' digests.

Prints per model the medians, the ratio, and the concurrent replay's own record (calls, how many
overlapped, its seconds). No goal: the figure is reported.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.config.settings import from_mapping
from tests.realmodels import MODELS, source_file

DEFAULT = "torch-cnn-legacy,vietcombank-captcha,silero-vad"


def settings_for(name: str, root: Path, samples: int, threads: int | None) -> Any:
    model = MODELS[name]
    path = source_file(model)
    generate = {"model": str(path), "seed": 0, **model.generate, "count": samples}
    checks: dict[str, Any] = {"lint": False}
    if threads:
        checks["concurrency"] = threads
    raw = {
        "store": {
            "url": f"sqlite:///{root}/db.sqlite",
            "baselines_dir": str(root / "b"),
            "benchsets_dir": str(root / "s"),
        },
        "benchsets": [{"name": "bench", "generate": generate}],
        "models": [{"name": "m", "path": str(path), "benchset": "bench", "checks": checks}],
    }
    return from_mapping(raw)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    print(f"{args.samples} samples, {args.rounds} rounds, median of whole run_check (fresh session each)")
    for name in args.models.split(","):
        root = Path(tempfile.mkdtemp(prefix=f"bench-concurrency-{name}-"))
        plain = settings_for(name, root, args.samples, None)
        both = settings_for(name, root, args.samples, args.threads)
        capture.capture_baseline(plan_for(plain, "m"))
        run_check(plan_for(both, "m"))  # warm the file cache and ORT's first-session costs
        times: dict[str, list[float]] = {"plain": [], "concurrency": []}
        records = []
        for _ in range(args.rounds):
            for label, settings in (("plain", plain), ("concurrency", both)):
                began = time.perf_counter()
                result = run_check(plan_for(settings, "m"))
                times[label].append(time.perf_counter() - began)
                assert result.verdict.value == "pass", [str(r) for r in result.reasons]
                if label == "concurrency":
                    records.append(result.details["concurrency"])
        medians = {label: statistics.median(values) for label, values in times.items()}
        calls = statistics.median(r["calls"] for r in records)
        overlapped = statistics.median(r["overlapped_calls"] for r in records)
        seconds = statistics.median(r["seconds"] for r in records)
        print(
            f"{name:<22} plain {medians['plain'] * 1000:8.1f} ms   concurrency: {args.threads}"
            f" {medians['concurrency'] * 1000:8.1f} ms   {medians['concurrency'] / medians['plain']:.2f}x"
            f"   (concurrent replay {seconds * 1000:.1f} ms, {calls:.0f} calls, {overlapped:.0f} overlapped)"
        )


if __name__ == "__main__":
    main()
