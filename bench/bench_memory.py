"""Peak memory of ``capture`` and ``check`` as the benchmark set grows: 16 samples vs 256.

Run:  .venv/bin/python bench/bench_memory.py [--samples 16 256] [--elements 1048576]

The model is ``x[1, N] -> Mul -> Add -> y``: a 4 MiB float32 output per sample (N = 1M) at
almost no inference cost, so what grows with the sample count is onnxmon's own bookkeeping.
For each sample count the benchmark set is materialized here first; then a baseline capture
and a check each run in a fresh Python subprocess, which reports its peak resident set size
(``VmHWM`` from ``/proc/self/status``). The figures printed are those peaks and the ratio of the
largest sample count's to the smallest's, side by side in one run. The goal is a ratio <= 1.5
for both: memory bounded by one sample, not by the benchmark set. It is measured here, never
asserted in tests.

To measure another checkout of onnxmon with the same script, put it first on the path:
``PYTHONPATH=/path/to/checkout .venv/bin/python bench/bench_memory.py`` (each child prints
which ``monitor`` it imported).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from monitor.config.plan import plan_for
from monitor.config.settings import from_mapping
from monitor.files import benchsets

# Runs in the child: capture or check, then the peak RSS of that process.
_CHILD = """
import json, sys
from pathlib import Path
import monitor
from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.runtime import envsnap

root, action = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, str(Path(sys.argv[3])))
from bench_memory import settings_for

plan = plan_for(settings_for(root), "big")
env = lambda: envsnap.capture(load_cuda_libs=False)
if action == "capture":
    capture.capture_baseline(plan, capture_env=env, promote=True)
    verdict = "captured"
else:
    verdict = run_check(plan, capture_env=env).verdict.value
status = Path("/proc/self/status").read_text()
peak_kib = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
print(json.dumps({"peak_mib": peak_kib / 1024, "verdict": verdict, "monitor": monitor.__file__}))
"""


def model(elements: int) -> onnx.ModelProto:
    """``y = x * 1.5 + 0.25`` over ``[1, elements]`` float32."""
    inits = [
        numpy_helper.from_array(np.array(1.5, np.float32), "k"),
        numpy_helper.from_array(np.array(0.25, np.float32), "c"),
    ]
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Add", ["m", "c"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, elements])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, elements])],
        inits,
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built.ir_version = 8
    return built


def settings_for(root: Path):  # type: ignore[no-untyped-def]
    """The workspace's settings: one model, one generated benchset (its count in ``count.txt``)."""
    count = int((root / "count.txt").read_text())
    return from_mapping(
        {
            "store": {"baselines_dir": "baselines", "benchsets_dir": "benchsets"},
            "benchsets": [{"name": "b", "generate": {"model": "big.onnx", "count": count}}],
            "models": [{"name": "big", "path": "big.onnx", "benchset": "b", "session": {"intra_op_num_threads": 1}}],
        },
        origin=root / "onnxmon.yaml",
    )


def _child(root: Path, action: str) -> dict[str, object]:
    script = Path(__file__).resolve().parent
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), action, str(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=root,  # not this checkout: PYTHONPATH or the installed onnxmon decides which monitor runs
    )
    if done.returncode != 0:
        raise SystemExit(f"{action} child failed:\n{done.stderr}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[16, 256])
    parser.add_argument("--elements", type=int, default=1 << 20)
    args = parser.parse_args()

    peaks: dict[str, dict[int, float]] = {"capture": {}, "check": {}}
    for count in args.samples:
        root = Path(tempfile.mkdtemp(prefix=f"onnxmon-bench-memory-{count}-"))
        onnx.save(model(args.elements), str(root / "big.onnx"))
        (root / "count.txt").write_text(str(count))
        plan = plan_for(settings_for(root), "big")
        benchsets.ensure(plan.benchset, plan.benchsets_dir)  # generated here, outside the measurement
        for action in ("capture", "check"):
            result = _child(root, action)
            peaks[action][count] = float(result["peak_mib"])  # type: ignore[arg-type]
            print(
                f"{action:8s} {count:4d} samples x {args.elements * 4 / 2**20:.0f} MiB output:"
                f" peak RSS {result['peak_mib']:7.1f} MiB  ({result['verdict']}; {result['monitor']})",
                flush=True,
            )
    low, high = min(args.samples), max(args.samples)
    for action, by_count in peaks.items():
        ratio = by_count[high] / by_count[low]
        print(f"{action:8s} peak RSS {high} / {low} samples: {ratio:.2f}x (goal <= 1.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
