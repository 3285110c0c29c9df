"""Cost of the static model diff and of the model manifest, on the corpus and a synthetic 100 MB model.

Run:  .venv/bin/python bench/bench_modeldiff.py [--corpus DIR] [--mb 100]

For every model file under the corpus folder (default ``$ONNXMON_CORPUS_DIR`` or
``~/.cache/onnxmon-corpus``) and for a synthetic model of ``--mb`` megabytes (a chain of 250
MatMuls over float32 weights, written with external data): the time of ``manifest()``, the size
of the manifest as strict JSON, and the time of ``diff_models`` and ``diff_against_manifest`` of
the model against a copy with one weight scaled by 1.001. Peak resident memory is printed last
(the diff holds both models once, plus one chunk of float64 per side).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from monitor import jsonsafe, modeldiff


def synthetic(path: Path, megabytes: int) -> Path:
    layers = 250
    side = int((megabytes * 2**20 / 4 / layers) ** 0.5)
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((side, side)).astype(np.float32), f"w{i}") for i in range(layers)
    ]
    nodes = [
        helper.make_node("MatMul", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"], name=f"mm{i}")
        for i in range(layers)
    ]
    graph = helper.make_graph(
        nodes,
        "synthetic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info(f"h{layers - 1}", TensorProto.FLOAT, [1, side])],
        weights,
    )
    onnx.save_model(helper.make_model(graph), str(path), save_as_external_data=True, location=path.name + ".data")
    return path


def scaled_copy(source: Path, target: Path) -> bool:
    """A copy with the largest float32 initializer scaled by 1.001; False when there is none."""
    model = onnx.load(str(source))
    floats = [t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT]
    if not floats:
        return False
    largest = max(floats, key=lambda t: int(np.prod(t.dims)))
    largest.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(largest) * 1.001).astype(np.float32), largest.name))
    onnx.save_model(model, str(target), save_as_external_data=True, location=target.name + ".data")
    return True


def measure(path: Path, scratch: Path) -> str:
    t0 = time.perf_counter()
    manifest = modeldiff.manifest(path)
    t_manifest = time.perf_counter() - t0
    size = len(jsonsafe.dumps(manifest))
    other = scratch / f"scaled-{path.parent.name}.onnx"
    scaled = scaled_copy(path, other)
    megabytes = path.stat().st_size / 2**20 + _data(path)
    line = f"{path.parent.name:<24} {megabytes:8.1f} MiB  manifest {size / 1024:7.1f} KiB in {t_manifest:6.3f} s"
    if scaled:
        t0 = time.perf_counter()
        diff = modeldiff.diff_models(path, other)
        t_diff = time.perf_counter() - t0
        t0 = time.perf_counter()
        modeldiff.diff_against_manifest(manifest, modeldiff.load_model(other))
        t_against = time.perf_counter() - t0
        line += f"  diff {t_diff:6.3f} s  vs manifest {t_against:6.3f} s  ({diff.summary[0]})"
    return line


def _data(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + ".data")) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--corpus",
        type=Path,
        default=Path(os.environ.get("ONNXMON_CORPUS_DIR") or Path.home() / ".cache" / "onnxmon-corpus"),
    )
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted((args.corpus / "models").glob("*/*.onnx")):
            print(measure(path, Path(scratch)))
        print(measure(synthetic(Path(scratch) / "synthetic.onnx", args.mb), Path(scratch)))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
