"""Replay overhead of ``onnxmon check`` versus a bare ``InferenceSession.run`` loop.

Run:  .venv/bin/python bench/bench_check.py [--rounds 7] [--samples 16]

Both sides use the *same* session and the same benchmark set, measured interleaved in one
process (these machines are noisy: only ratios measured side by side mean anything):

- bare:    ``for feeds in samples: ort_session.run(None, feeds)`` with inputs preloaded;
- run path: onnxmon's inference path on the same preloaded inputs (signature validation,
           the timeout watchdog, output collection) — the per-inference overhead;
- replay:  the same plus loading each sample from disk with checksum verification;
- replay+compare: the same plus the full metric suite against the baseline;
- check:   the whole ``run_check`` (hash the model file, load and verify the baseline,
           create the session, replay, compare, capture the environment).

Prints the median of each and the ratios; the goal for the replay overhead is <= 1.03x.
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
from monitor.check import replay_benchset, run_check
from monitor.compare import outputs
from monitor.config.plan import plan_for
from monitor.config.settings import from_mapping
from monitor.files import benchsets
from monitor.runtime.session import Deadline, Session


def convnet(channels: int = 32, size: int = 96, seed: int = 0) -> onnx.ModelProto:
    """A small VGG-like CNN whose inference takes milliseconds, like a real vision model."""
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
        helper.make_node("GlobalAveragePool", [prev], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["prob"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [
            helper.make_tensor_value_info("flat", TensorProto.FLOAT, [1, channels]),
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, channels]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--samples", type=int, default=16)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="onnxmon-bench-"))
    onnx.save(convnet(), str(root / "convnet.onnx"))
    settings = from_mapping(
        {
            "store": {"baselines_dir": "baselines", "benchsets_dir": "benchsets"},
            "benchsets": [{"name": "b", "generate": {"model": "convnet.onnx", "count": args.samples}}],
            "models": [
                {
                    "name": "convnet",
                    "path": "convnet.onnx",
                    "benchset": "b",
                    "session": {"intra_op_num_threads": 1},
                }
            ],
        },
        origin=root / "onnxmon.yaml",
    )
    plan = plan_for(settings, "convnet")
    model = plan.model
    baseline = capture.capture_baseline(plan, capture_env=lambda: _no_env())
    bench = benchsets.open_benchset(plan.benchsets_dir, "b")
    session = Session(model.path, model.providers, model.session)
    raw = session._session  # the very same InferenceSession
    feeds = [bench.load_sample(i) for i in range(len(bench))]
    expected = baseline.outputs()
    tolerances = plan.tolerances(session.output_names)

    def bare() -> None:
        for f in feeds:
            raw.run(None, f)

    def run_path() -> None:
        with Deadline(600) as guard:
            for f in feeds:
                session.run(f, guard=guard)

    def replay() -> None:
        replay_benchset(session, bench, 1)

    def replay_compare() -> None:
        result = replay_benchset(session, bench, 1)
        outputs.compare_outputs(result.outputs, expected, tolerances)

    def check() -> None:
        run_check(plan, capture_env=lambda: _no_env())

    loops = {
        "bare": bare,
        "run path": run_path,
        "replay": replay,
        "replay+compare": replay_compare,
        "check": check,
    }
    timings: dict[str, list[float]] = {name: [] for name in loops}
    for fn in loops.values():  # warm-up
        fn()
    for _ in range(args.rounds):
        for name, fn in loops.items():
            began = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - began)
    med = {k: statistics.median(v) for k, v in timings.items()}
    out_elems = sum(a.size for arrays in expected.values() for a in arrays)
    print(f"model convnet 1x3x96x96, 4 conv layers; {len(feeds)} samples; {out_elems:,} output elements")
    print(f"{'loop':<16}{'median s':>10}{'ratio vs bare':>16}")
    for name in loops:
        print(f"{name:<16}{med[name]:>10.4f}{med[name] / med['bare']:>15.3f}x")
    return 0


def _no_env():  # type: ignore[no-untyped-def]
    """The environment snapshot is measured separately; keep it out of the replay loop."""
    from monitor.runtime import envsnap

    return envsnap.capture(load_cuda_libs=False)


if __name__ == "__main__":
    sys.exit(main())
