"""What the output digests cost a check (docs/fleet.md): goal <= 1 % of a warm check.

Run:  .venv/bin/python bench/bench_digest.py [--rounds 11] [--samples 16]

One process, measured interleaved (only ratios measured side by side mean anything here):

- check:  a warm ``run_check`` (the worker keeps its session, as the daemon's check workers do) of a
          small CNN whose outputs are large for its compute: the last feature map (32x96x96 float32,
          1.2 MB a sample) beside the class scores, the case where hashing weighs most;
- digest: ``DigestAccumulator`` fed each sample's outputs right after the session produced them, as the
          check feeds it (xxh3-128 of every output's bytes per sample, the sums, the run digest); only
          the digest's own time is counted, not the inference.

Prints the median of each and digest / check, the figure the README carries.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor import capture
from monitor.check import run_check
from monitor.compare.digest import DigestAccumulator, run_digest
from monitor.config.plan import plan_for
from monitor.config.settings import from_mapping
from monitor.files import benchsets
from monitor.runtime.session import Session
from monitor.runtime.worker_state import WorkerState


def feature_net(channels: int = 32, size: int = 96, seed: int = 0) -> onnx.ModelProto:
    """4 conv layers; outputs the last feature map and the pooled scores."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev, c_in = [], [], "x", 3
    for i in range(4):
        w = (rng.normal(size=(channels, c_in, 3, 3)) / np.sqrt(9 * c_in)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(channels, np.float32), f"b{i}")]
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        prev, c_in = f"r{i}", channels
    nodes += [
        helper.make_node("Identity", [prev], ["features"]),
        helper.make_node("GlobalAveragePool", [prev], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "feature_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [
            helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, channels, size, size]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, channels]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="onnxmon-bench-"))
    onnx.save(feature_net(), str(root / "net.onnx"))
    settings = from_mapping(
        {
            "store": {"baselines_dir": "baselines", "benchsets_dir": "benchsets"},
            "benchsets": [{"name": "b", "generate": {"model": "net.onnx", "count": args.samples}}],
            "models": [{"name": "net", "path": "net.onnx", "benchset": "b"}],
        },
        origin=root / "onnxmon.yaml",
    )
    plan = plan_for(settings, "net")
    capture.capture_baseline(plan)
    bench = benchsets.open_benchset(plan.benchsets_dir, "b")
    session = Session(plan.model.path, plan.model.providers, plan.model.session)
    feeds = [bench.load_sample(i) for i in range(len(bench))]
    worker = WorkerState()

    def check() -> None:
        result = run_check(plan, worker=worker)
        assert result.verdict.value == "pass", result.reasons

    def digest() -> float:
        accumulator, spent = DigestAccumulator(session.output_names), 0.0
        for sample in feeds:
            outputs = session.run(sample)
            began = time.perf_counter()
            accumulator.feed(outputs)
            spent += time.perf_counter() - began
        began = time.perf_counter()
        run_digest(accumulator.finish())
        return spent + time.perf_counter() - began

    def whole() -> float:
        began = time.perf_counter()
        check()
        return time.perf_counter() - began

    loops = {"check": whole, "digest": digest}
    timings: dict[str, list[float]] = {name: [] for name in loops}
    for fn in loops.values():  # warm-up
        fn()
    for _ in range(args.rounds):
        for name, fn in loops.items():
            timings[name].append(fn())
    med = {k: statistics.median(v) for k, v in timings.items()}
    size = sum(a.nbytes for a in session.run(feeds[0]).values()) * len(feeds)
    print(f"{len(feeds)} samples, {size / 2**20:.1f} MiB of outputs per check")
    for name in loops:
        print(f"{name:<8}{med[name] * 1000:>10.2f} ms")
    print(f"digest / warm check: {med['digest'] / med['check'] * 100:.2f} % (goal <= 1 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
