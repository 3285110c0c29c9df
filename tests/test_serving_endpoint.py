"""Models checked where they are served: a real Open Inference Protocol server (KServe's, from PyPI) on
loopback, REST and gRPC, serving a corpus model with ONNX Runtime (``tests/oip.py``, ``tests/oip_server.py``).

Ground truth comes from plain ONNX Runtime and ``tritonclient``, never from onnxmon: the served answers
are bitwise ONNX Runtime's (the plain server), or provably not (the rounding server).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from monitor import capture
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.files import benchsets
from monitor.results import CheckResult, Verdict
from tests.oip import OipServer
from tests.workspace import Workspace

pytestmark = [pytest.mark.process, pytest.mark.server]

MODEL = Path(__file__).resolve().parent / "corpus" / "torch" / "cnn_legacy.onnx"  # the committed corpus CNN
PROTOCOLS = ("v2-rest", "v2-grpc")


def served_workspace(root: Path, server: OipServer, protocol: str, **endpoint: Any) -> Workspace:
    """A workspace whose model ``cnn`` is the corpus CNN, served by ``server``; its baseline captured locally."""
    ws = Workspace(root)
    ws.add_model("cnn", onnx.load(str(MODEL)), count=3, dims={"batch": 2}, timeout="60s")
    ws.set("cnn", endpoint={"protocol": protocol, "url": server.url(protocol), "model": server.name, **endpoint})
    capture.capture_baseline(plan_for(ws.settings(), "cnn"), promote=True)
    return ws


def check(ws: Workspace) -> CheckResult:
    return run_check(plan_for(ws.settings(), "cnn"))


def codes(result: CheckResult) -> list[str]:
    return [r.code for r in result.all_reasons()]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("plain")
    with OipServer(copy_model(folder), "cnn") as server:
        yield server


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_served_model_passes_bitwise_against_the_baseline_captured_locally(
    plain: OipServer, tmp_path: Path, protocol: str
) -> None:
    ws = served_workspace(tmp_path, plain, protocol)
    # Ground truth: the server's answer to sample 0 is ONNX Runtime's, bit for bit (plain tritonclient).
    bench = benchsets.ensure(ws.settings().benchset("cnn-bench"), ws.settings().store.benchsets_dir)
    feeds = bench.load_sample(0)
    expected = ort.InferenceSession(str(MODEL)).run(None, feeds)[0]
    assert np.array_equal(raw_answer(plain, protocol, feeds), expected)

    result = check(ws)

    assert result.verdict is Verdict.PASS, result.all_reasons()
    assert all(o.metrics.bitwise_equal for o in result.outputs)
    serving = result.details["serving"]
    assert serving["split"] == "none"
    assert serving["cache_probe"]["result"] == "not_cached"
    fields = result.environment["fields"]
    assert fields["serving.server.name"]["value"] == "kserve"
    assert fields["serving.server.version"]["value"] == "0.21.0" or fields["serving.server.version"]["stable"]
    assert "endpoint_s" in result.timings


def test_a_server_upgrade_is_an_environment_change_with_its_fields_named(plain: OipServer, tmp_path: Path) -> None:
    ws = served_workspace(tmp_path, plain, "v2-rest", image_tag="kserve:0.21.0")
    ws.set("cnn", endpoint={**ws.models["cnn"]["endpoint"], "image_tag": "kserve:0.22.0"})
    changed = {c["field"]: c for c in check(ws).details["env_diff"]}
    assert changed["serving.image_tag"]["old"] == "kserve:0.21.0"
    assert changed["serving.image_tag"]["new"] == "kserve:0.22.0"


def test_json_answers_rounded_to_six_digits_are_a_serving_drift(tmp_path: Path) -> None:
    with OipServer(copy_model(tmp_path), "cnn", variant="round6") as server:
        ws = served_workspace(tmp_path / "ws", server, "v2-rest")
        # Six digits are within the default tolerance (rtol 1e-4): a served model held to bitwise, as here, is not.
        ws.set("cnn", tolerance={"default": {"atol": 0.0, "rtol": 0.0}})
        bench = benchsets.ensure(ws.settings().benchset("cnn-bench"), ws.settings().store.benchsets_dir)
        feeds = bench.load_sample(0)
        truth = ort.InferenceSession(str(MODEL)).run(None, feeds)[0]
        assert not np.array_equal(raw_answer(server, "v2-rest", feeds), truth)  # the drift is real
        result = check(ws)
    assert result.verdict is Verdict.FAIL
    assert "serving_drift" in codes(result)
    assert result.details["serving"]["split"] == "serving"
    assert result.details["serving"]["local"] == {"probs": "pass"}


def test_a_response_cache_answering_the_set_is_reported_as_cached(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.add_model("cnn", onnx.load(str(MODEL)), count=3, dims={"batch": 2}, timeout="60s")
    settings = ws.settings()
    bench = benchsets.ensure(settings.benchset("cnn-bench"), settings.store.benchsets_dir)
    warm = tmp_path / "warm"
    warm.mkdir()
    for index in range(len(bench)):  # the cache holds the set's answers, made by the model as it was
        np.savez(warm / f"{index}.npz", **bench.load_sample(index))
    with OipServer(copy_model(tmp_path), "cnn", variant="cache", warm=warm) as server:
        ws.set("cnn", endpoint={"protocol": "v2-grpc", "url": server.url("v2-grpc"), "model": "cnn"})
        capture.capture_baseline(plan_for(ws.settings(), "cnn"), promote=True)
        result = check(ws)
    assert all(result.outputs), "the set's answers come from the cache and match the baseline"
    assert result.verdict is Verdict.FAIL
    assert "endpoint_cached" in codes(result)
    assert result.details["serving"]["cache_probe"]["result"] == "cached"


@pytest.mark.parametrize(
    ("variant", "protocol", "code"),
    [
        ("down", "v2-rest", "endpoint_unreachable"),
        ("down", "v2-grpc", "endpoint_unreachable"),
        ("slow", "v2-rest", "endpoint_timeout"),
        ("slow", "v2-grpc", "endpoint_timeout"),
        ("error500", "v2-rest", "endpoint_status"),
        ("error500", "v2-grpc", "endpoint_status"),
        ("dtype", "v2-rest", "endpoint_dtype"),
        ("shape", "v2-grpc", "endpoint_shape"),
        ("unknown-model", "v2-rest", "endpoint_status"),  # HTTP 404 from the server
        ("unknown-model", "v2-grpc", "endpoint_status"),
    ],
)
def test_a_broken_server_is_one_clear_reason_never_a_crash(
    plain: OipServer, tmp_path: Path, variant: str, protocol: str, code: str
) -> None:
    ws = served_workspace(tmp_path / "ws", plain, protocol, timeout_s="2s")
    if variant == "down":
        server = None
        ws.set("cnn", endpoint={**ws.models["cnn"]["endpoint"], "url": f"127.0.0.1:{free_closed_port()}"})
    elif variant == "unknown-model":
        server = None
        ws.set("cnn", endpoint={**ws.models["cnn"]["endpoint"], "model": "not-served"})
    else:
        server = OipServer(copy_model(tmp_path), "cnn", variant=variant, delay=6.0)
        ws.set("cnn", endpoint={**ws.models["cnn"]["endpoint"], "url": server.url(protocol)})
    try:
        result = check(ws)
    finally:
        if server is not None:
            server.stop()
    assert result.verdict is Verdict.ERROR
    assert codes(result)[0] == code, result.all_reasons()
    assert len([c for c in codes(result) if c.startswith("endpoint_")]) == 1


def copy_model(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(MODEL, folder / "served.onnx"))


def free_closed_port() -> int:
    from tests.serving import free_port

    return free_port()


def raw_answer(server: OipServer, protocol: str, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The server's ``probs`` for ``feeds`` through plain tritonclient (binary / raw), no onnxmon code."""
    if protocol == "v2-rest":
        import tritonclient.http as client
    else:
        import tritonclient.grpc as client  # type: ignore[no-redef]
    connection = client.InferenceServerClient(server.url(protocol))
    tensor = client.InferInput("image", list(feeds["image"].shape), "FP32")
    tensor.set_data_from_numpy(feeds["image"])
    answer = connection.infer(server.name, [tensor], outputs=[client.InferRequestedOutput("probs")])
    connection.close()
    return np.asarray(answer.as_numpy("probs"))


def test_the_daemon_keeps_checking_the_other_models_while_an_endpoint_is_down(plain: OipServer, tmp_path: Path) -> None:
    from monitor.store import Store
    from tests import modelzoo
    from tests.serving import Served, free_port

    ws = served_workspace(tmp_path, plain, "v2-grpc", timeout_s="1s")
    ws.add_model("clf", modelzoo.classifier(), count=2)
    capture.capture_baseline(plan_for(ws.settings(), "clf"), promote=True)
    ws.set("cnn", endpoint={**ws.models["cnn"]["endpoint"], "url": f"127.0.0.1:{free_closed_port()}"})
    for name in ("cnn", "clf"):
        ws.set(name, schedule={"interval": "3s"}, timeout="2s")
    ws.extra["daemon"] = {"startup_spread": 0}
    ws.write()
    url = ws.settings().store.url

    def runs(model: str) -> list[Any]:
        with Store(url) as store:
            return store.runs(model)

    served = Served(ws, free_port())
    try:
        served.wait_until(lambda: len(runs("cnn")) >= 2 and len(runs("clf")) >= 2, "two runs of each model", 120)
    finally:
        assert served.stop() == 0
    assert {r.verdict for r in runs("cnn")} == {"error"}
    assert all(r.reasons[0].code == "endpoint_unreachable" for r in runs("cnn"))
    assert {r.verdict for r in runs("clf")} == {"pass"}
