"""Output digests (docs/fleet.md): what a check computed, per output and sample, hashed; held to plain ORT + xxhash."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import xxhash
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api.app import create_app
from monitor.check import run_check
from monitor.compare.digest import array_digest
from monitor.config.plan import plan_for
from monitor.files import benchsets
from monitor.results import CheckResult, Verdict
from monitor.store import Store
from tests import modelzoo
from tests.test_metrics import RealDaemon
from tests.workspace import Workspace


def plain_digest(array: np.ndarray) -> str:
    """The documented rule, written again: xxh3-128 of ``<dtype.str>[shape]|`` then the raw C-order bytes."""
    header = f"{array.dtype.str}{list(array.shape)}|".encode()
    return xxhash.xxh3_128_hexdigest(header + np.ascontiguousarray(array).tobytes())


def plain_digests(ws: Workspace, model_path: Path, name: str) -> dict[str, list[str]]:
    """Per output, each sample's digest from a plain ONNX Runtime session over the benchmark set's samples."""
    bench = benchsets.open_benchset(ws.settings().store.benchsets_dir, f"{name}-bench")
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    found: dict[str, list[str]] = {n: [] for n in names}
    for index in range(len(bench)):
        for output, value in zip(names, session.run(names, bench.load_sample(index)), strict=True):
            found[output].append(plain_digest(np.asarray(value)))
    return found


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Workspace, CheckResult]:
    ws = Workspace(tmp_path_factory.mktemp("digest"))
    ws.add_model("m", modelzoo.classifier(), count=5, dims={"batch": 3})
    capture.capture_baseline(plan_for(ws.settings(), "m"))
    return ws, run_check(plan_for(ws.settings(), "m"))


def test_each_outputs_sample_digests_are_xxh3_128_of_dtype_shape_and_bytes(
    checked: tuple[Workspace, CheckResult],
) -> None:
    ws, result = checked
    assert result.verdict is Verdict.PASS
    want = plain_digests(ws, ws.root / "models" / "m.onnx", "m")
    assert {d.name: list(d.samples) for d in result.digests} == want
    assert all(len(s) == 32 for d in result.digests for s in d.samples) and len(want["logits"]) == 5
    run = xxhash.xxh3_128()
    for digest in result.digests:
        run.update(f"{digest.name}\x00{','.join(want[digest.name])}\x01".encode())
    assert result.run_digest == run.hexdigest()


def test_two_checks_of_one_setup_share_their_run_digest_and_stack_key(checked: tuple[Workspace, CheckResult]) -> None:
    ws, result = checked
    again = run_check(plan_for(ws.settings(), "m"))
    assert again.run_digest == result.run_digest and again.stack_key == result.stack_key
    assert result.stack["model.sha256"] == result.model_sha256 and result.stack["benchset.name"] == "m-bench"


def test_one_flipped_bit_dtype_or_shape_changes_the_digest() -> None:
    values = np.linspace(-1, 1, 12, dtype=np.float32)
    flipped = values.copy()
    flipped.view(np.uint32)[3] ^= 1  # the last mantissa bit: within any tolerance
    assert abs(float(flipped[3]) - float(values[3])) < 1e-6
    digests = {array_digest(a) for a in (values, flipped, values.reshape(3, 4), values.view(np.int32))}
    assert len(digests) == 4
    assert array_digest(values) == plain_digest(values)
    assert array_digest(np.asfortranarray(values.reshape(3, 4))) == plain_digest(values.reshape(3, 4))


def test_the_float_sums_are_the_plain_sum_and_l2_norm(checked: tuple[Workspace, CheckResult]) -> None:
    ws, result = checked
    bench = benchsets.open_benchset(ws.settings().store.benchsets_dir, "m-bench")
    session = ort.InferenceSession(str(ws.root / "models" / "m.onnx"), providers=["CPUExecutionProvider"])
    values = [np.asarray(session.run(["logits"], bench.load_sample(i))[0], np.float64) for i in range(len(bench))]
    (logits,) = [d for d in result.digests if d.name == "logits"]
    assert logits.total == pytest.approx(sum(float(v.sum()) for v in values), rel=1e-5, abs=1e-5)
    assert logits.magnitude == pytest.approx(float(np.sqrt(sum(float((v * v).sum()) for v in values))), rel=1e-5)


def test_non_finite_elements_count_as_zero_in_the_sums() -> None:
    from monitor.compare.digest import DigestAccumulator

    accumulator = DigestAccumulator(["y"])
    accumulator.feed({"y": np.array([3.0, np.nan, 4.0, np.inf], np.float32)})
    ((digest),) = accumulator.finish()
    assert (digest.total, digest.magnitude) == (7.0, 5.0)


def test_digests_are_stored_and_shown_by_the_api_and_the_run_page(
    checked: tuple[Workspace, CheckResult], tmp_path: Path
) -> None:
    ws, result = checked
    with Store(f"sqlite:///{tmp_path / 'history.db'}") as store:
        store.upgrade()
        run_id = store.record_run(result, node="n1")
        record = store.run(run_id)
        assert record is not None
        assert (record.digests, record.run_digest, record.stack_key) == (
            result.digests,
            result.run_digest,
            result.stack_key,
        )
        assert dict(record.stack) == dict(result.stack)
        client = TestClient(create_app(RealDaemon(ws.settings(), store)), raise_server_exceptions=False)
        document = client.get(f"/api/v1/runs/{run_id}").json()
        assert document["run_digest"] == result.run_digest and document["stack_key"] == result.stack_key
        assert [d["samples"] for d in document["digests"]] == [list(d.samples) for d in result.digests]
        page = client.get(f"/runs/{run_id}").text
        assert result.run_digest is not None and result.run_digest in page
        assert result.digests[0].samples[0][:12] in page


@pytest.mark.process
def test_check_json_prints_the_digests(checked: tuple[Workspace, CheckResult]) -> None:
    from tests.conftest import onnxmon

    ws, result = checked
    done = onnxmon("check", "m", "-o", "json", "--no-store", "-c", str(ws.config_file))
    assert done.exit_code == 0, done.output
    (printed,) = json.loads(done.stdout)
    assert printed["run_digest"] == result.run_digest
    assert [d["samples"] for d in printed["digests"]] == [list(d.samples) for d in result.digests]
