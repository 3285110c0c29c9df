"""Real traffic staged under faults: a number that does not fit its datatype, and a disk that fills while
the sample is written.

A value out of range of its integer datatype (300 as UINT8, 2**70 as INT64) is the sender's mistake: 400
naming the input, never a 500. A disk that fills (here a file-size limit, RLIMIT_FSIZE, in a process of
its own) is not the sender's: 507 with the staging folder named, and no partial ``.tmp-*.npz`` left
behind to be counted as staged and promoted as a sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.errors import BenchsetError
from monitor.files import traffic
from tests.test_api_traffic import AUTH, served  # noqa: F401 (a fixture)

URL = "/api/v1/benchsets/traffic/samples"


@pytest.mark.parametrize(("datatype", "value"), [("UINT8", 300), ("INT64", 2**70), ("UINT32", -1)])
def test_an_integer_out_of_its_datatype_is_400_naming_the_input(datatype: str, value: int) -> None:
    with pytest.raises(BenchsetError, match="input 'x'"):
        traffic.payload_sample({"inputs": [{"name": "x", "shape": [1], "datatype": datatype, "data": [value]}]})


def test_an_integer_out_of_its_datatype_posted_is_400(served: Any) -> None:  # noqa: F811
    _, client = served
    payload = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "INT64", "data": [2**70] * 16}]}
    answer = client.post(URL, json=payload, headers=AUTH)
    assert answer.status_code == 400, answer.text
    assert "input 'x'" in answer.json()["detail"]


def test_json_nested_too_deeply_is_400(served: Any) -> None:  # noqa: F811
    _, client = served
    body = b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": ' + b"[" * 200_000 + b"]" * 200_000
    answer = client.post(URL, content=body + b"}]}", headers={**AUTH, "Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert "nested too deeply" in answer.json()["detail"]


def test_a_partial_temporary_file_is_never_a_staged_sample(tmp_path: Path) -> None:
    folder = traffic.staging_dir(tmp_path, "traffic")
    folder.mkdir(parents=True)
    (folder / ".tmp-abc123.npz").write_bytes(b"PK\x03\x04 cut short")  # a write that a full disk stopped
    assert traffic.staged(tmp_path, "traffic") == []


FULL_DISK = textwrap.dedent(
    """
    import json, resource, signal, sys
    from fastapi.testclient import TestClient
    from monitor.api.app import create_app
    from monitor.config import settings as config
    from monitor.store import Store
    from tests.test_metrics import RealDaemon

    settings = config.load(sys.argv[1])
    payload = json.loads(open(sys.argv[2]).read())
    headers = json.loads(sys.argv[3])
    with Store(settings.store.url) as store:
        client = TestClient(create_app(RealDaemon(settings, store)), raise_server_exceptions=False)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(2), as ENOSPC from a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (128, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        answer = client.post(sys.argv[4], json=payload, headers=headers)
        print(json.dumps({"status": answer.status_code, "body": answer.text}))
    """
)


@pytest.mark.process
def test_a_disk_that_fills_while_a_sample_is_staged_is_507_and_leaves_nothing(
    served: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    ws, _ = served
    values = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32) * 1e6
    payload = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": values.ravel().tolist()}]}
    (tmp_path / "payload.json").write_text(json.dumps(payload))
    root = ws.settings().store.benchsets_dir
    traffic.staging_dir(root, "traffic").mkdir(parents=True)  # the folder is there: the sample's file is what fails
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(ws.config_file), str(tmp_path / "payload.json"), json.dumps(AUTH), URL],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["status"] == 507, answer
    assert "could not be staged" in answer["body"] and "traffic" in answer["body"]
    assert list(traffic.staging_dir(root, "traffic").iterdir()) == []  # no partial file left
    assert traffic.staged(root, "traffic") == []


def test_a_sample_removed_while_listed_is_not_a_500(served: Any) -> None:  # noqa: F811
    """A promotion removes staged files while another request lists them: a name found, then gone (here a
    dangling link, found by the listing and gone at its stat) must not fail the listing or the staging."""
    ws, client = served
    folder = traffic.staging_dir(ws.settings().store.benchsets_dir, "traffic")
    folder.mkdir(parents=True)
    (folder / f"{'0' * 64}.npz").symlink_to(folder / "promoted-meanwhile.npz")
    listed = client.get(URL)
    assert listed.status_code == 200 and listed.json()["staged"] == 0, listed.text
    values = np.arange(16, dtype=np.float32).reshape(1, 16)
    payload = {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": values.ravel().tolist()}]}
    answer = client.post(URL, json=payload, headers=AUTH)
    assert answer.status_code == 201 and answer.json()["staged"] == 1, answer.text
