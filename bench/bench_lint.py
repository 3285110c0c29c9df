"""What export lint adds to a check: ``run_check`` with lint off, lint cached, lint cold.

Run:  .venv/bin/python bench/bench_lint.py [--model PATH] [--rounds 7] [--samples 8]

One model, one benchmark set, one baseline; the three variants run interleaved in one process
(these machines are noisy: only ratios measured side by side mean anything):

- off:    ``models[].checks.lint: false``;
- cached: lint on, its report already in the cache (every check after the first of a file);
- cold:   lint on with an empty cache (the first check of a new file: reads every weight).

Also times ``lint_model`` alone and the runtime-support probe once. Prints medians and ratios;
the goal is cached <= 1.05x off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.config.settings import from_mapping
from monitor.files import signature
from monitor.lint import lint_model
from monitor.runtime import support

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "tests" / "corpus" / "torch" / "cnn_legacy.onnx"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-lint-"))
    dims = _dims(args.model)
    raw = {
        "store": {
            "url": f"sqlite:///{root}/db.sqlite",
            "baselines_dir": str(root / "b"),
            "benchsets_dir": str(root / "s"),
        },
        "benchsets": [{"name": "bench", "generate": {"model": str(args.model), "count": args.samples, "dims": dims}}],
        "models": [{"name": "m", "path": str(args.model), "benchset": "bench", "checks": {"lint": True}}],
    }
    on = from_mapping(raw)
    raw["models"][0]["checks"] = {"lint": False}
    off = from_mapping(raw)
    capture.capture_baseline(plan_for(on, "m"))
    started = time.perf_counter()
    support.probe()
    probe_s = time.perf_counter() - started
    os.environ["XDG_STATE_HOME"] = str(root / "warm")
    run_check(plan_for(on, "m"))  # fills the cache
    times: dict[str, list[float]] = {"off": [], "cached": [], "cold": [], "lint alone": []}
    for round_ in range(args.rounds):
        for name, settings, state in (("off", off, "warm"), ("cached", on, "warm"), ("cold", on, f"cold{round_}")):
            os.environ["XDG_STATE_HOME"] = str(root / state)
            began = time.perf_counter()
            result = run_check(plan_for(settings, "m"))
            times[name].append(time.perf_counter() - began)
            assert result.verdict.value == "pass", result.reasons
        began = time.perf_counter()
        lint_model(args.model, support=support.probe())
        times["lint alone"].append(time.perf_counter() - began)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"model {args.model.name}, {args.samples} samples, {args.rounds} rounds (median s)")
    print(f"runtime support probe (once per process): {probe_s * 1000:.1f} ms")
    for name, value in medians.items():
        print(f"  {name:<11} {value * 1000:9.1f} ms   {value / medians['off']:.3f}x off")


def _dims(model: Path) -> dict[str, int]:
    named: dict[str, int] = {}
    for spec in signature.model_signature(model):
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, str):
                named[dim if dim != "?" else f"{spec.name}:{axis}"] = 1 if axis == 0 else 16
    return named


if __name__ == "__main__":
    main()
