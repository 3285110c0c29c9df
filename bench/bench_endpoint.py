"""The endpoint runner's overhead over a bare tritonclient loop of the same requests: goal <= 1.1x.

A real Open Inference Protocol server (KServe's Python server serving the corpus CNN with ONNX Runtime,
``tests/oip.py``; needs ``.venv-kserve``) on loopback. Per protocol (REST binary, gRPC raw), rounds
alternate the two sides over the same samples: ``EndpointRunner.run_repeats`` (what a check's replay
calls: the inputs fitted and validated against the local session's signature, the request built, the
answer's datatype and shape checked) and a bare loop (``InferInput``, ``set_data_from_numpy``, ``infer``,
``as_numpy``). Prints the median seconds of each side and their ratio.

    .venv/bin/python bench/bench_endpoint.py --rounds 21 --samples 32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from monitor.config.endpoint_schema import EndpointConfig
from monitor.runtime.session import Deadline, Session
from monitor.serving.client import EndpointRunner
from tests.oip import OipServer

MODEL = Path(__file__).resolve().parent.parent / "tests" / "corpus" / "torch" / "cnn_legacy.onnx"


def bare(module: Any, client: Any, samples: list[dict[str, np.ndarray]]) -> float:
    began = time.perf_counter()
    for feeds in samples:
        tensor = module.InferInput("image", list(feeds["image"].shape), "FP32")
        tensor.set_data_from_numpy(feeds["image"])
        answer = client.infer("cnn", [tensor], outputs=[module.InferRequestedOutput("probs")])
        answer.as_numpy("probs")
    return time.perf_counter() - began


def runner_side(runner: EndpointRunner, samples: list[dict[str, np.ndarray]]) -> float:
    began = time.perf_counter()
    with Deadline(None) as guard:
        for index, feeds in enumerate(samples):
            runner.run_repeats(feeds, 1, guard=guard, where=f"sample {index}")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--samples", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    samples = [{"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(args.samples)]
    session = Session(MODEL, [])
    dtypes = {o.name: o.dtype for o in session.info.outputs}

    def prepare(feeds: Any) -> Any:
        fitted = session.fit_float_inputs(feeds)
        session.check_inputs(fitted)
        return fitted

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "cnn.onnx"
        model.write_bytes(MODEL.read_bytes())
        with OipServer(model, "cnn") as server:
            for protocol in ("v2-rest", "v2-grpc"):
                if protocol == "v2-rest":
                    import tritonclient.http as module
                else:
                    import tritonclient.grpc as module  # type: ignore[no-redef]
                client = module.InferenceServerClient(server.url(protocol))
                cfg = EndpointConfig(protocol=protocol, url=server.url(protocol), model="cnn")  # type: ignore[arg-type]
                runner = EndpointRunner(cfg, dtypes, prepare=prepare)
                bare(module, client, samples), runner_side(runner, samples)  # warm both connections
                ours, theirs = [], []
                for _ in range(args.rounds):
                    ours.append(runner_side(runner, samples))
                    theirs.append(bare(module, client, samples))
                runner.close()
                client.close()
                a, b = statistics.median(ours), statistics.median(theirs)
                print(
                    f"{protocol}: endpoint runner {a * 1e3:.1f} ms, bare tritonclient {b * 1e3:.1f} ms"
                    f" for {args.samples} requests: {a / b:.3f}x (goal <= 1.1x)"
                )


if __name__ == "__main__":
    main()
