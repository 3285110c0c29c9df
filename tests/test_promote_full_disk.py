"""``baseline promote`` on a full disk (issue 42 #17): one line and exit 3 on the command line, 507 from the API.

The outside attack filled the baselines' disk and promoted: a traceback from the CLI and a bare 500
from the API. Now the promotion is written both or neither (ACTIVE and the promotion log) and the
failure names the file and says the disk is full. The disk is a real 1 MiB tmpfs filled to its last
byte (root only; skipped where mount is refused).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api.app import create_app
from monitor.config.plan import plan_for
from monitor.files import baseline_undo, baselines
from monitor.store import Store
from tests import modelzoo
from tests.conftest import onnxmon
from tests.disks import fill, mounted_tmpfs
from tests.test_api import TOKEN, bearer, with_api
from tests.test_metrics import RealDaemon
from tests.workspace import Workspace

pytestmark = pytest.mark.process  # mount(8)


class Disk:
    """A workspace whose baselines live on a 1 MiB tmpfs: ``first`` active, ``second`` captured beside it."""

    def __init__(self, ws: Workspace, where: Path) -> None:
        self.ws, self.where = ws, where
        ws.add_model("clf", modelzoo.classifier(), count=2)
        ws.write()
        plan = plan_for(ws.settings(), "clf")
        self.first = capture.capture_baseline(plan).id  # the first baseline is promoted
        self.second = capture.capture_baseline(plan).id
        self.model_dir = where / "clf"
        self.before = self.snapshot()
        assert baselines.active_id(where, "clf") == self.first

    def snapshot(self) -> dict[str, bytes]:
        """Every file of the model's folder but the baselines themselves: ACTIVE, the log, any temporary file."""
        return {p.name: p.read_bytes() for p in self.model_dir.iterdir() if p.is_file()}

    def assert_unchanged(self) -> None:
        assert self.snapshot() == self.before, "ACTIVE and the promotion log as they were, no temporary file"
        assert baselines.active_id(self.where, "clf") == self.first


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    ws = Workspace(tmp_path)
    with mounted_tmpfs(ws.root / "baselines") as where:
        yield Disk(ws, where)


def test_baseline_promote_on_a_full_disk_is_one_line_exit_3_and_changes_nothing(disk: Disk) -> None:
    filler = fill(disk.where)
    ran = onnxmon("baseline", "promote", disk.second, "-c", disk.ws.config_file)
    print(f"\nMEASURED exit {ran.exit_code}: {ran.stderr.strip()}")
    assert ran.exit_code == 3, ran.output
    assert "Traceback" not in ran.output and len(ran.stderr.strip().splitlines()) == 1
    assert f"cannot write {disk.model_dir / 'ACTIVE'}: the disk is full" in ran.stderr
    assert f"{disk.first} stays active" in ran.stderr
    disk.assert_unchanged()
    filler.unlink()
    again = onnxmon("baseline", "promote", disk.second, "-c", disk.ws.config_file)
    assert again.exit_code == 0, again.output
    assert baselines.active_id(disk.where, "clf") == disk.second


def test_promote_through_the_api_on_a_full_disk_is_507_and_changes_nothing(disk: Disk, tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'history.db'}") as store:
        store.upgrade()
        client = TestClient(create_app(RealDaemon(with_api(disk.ws.settings(), token=TOKEN), store)))
        filler = fill(disk.where)
        answer = client.post(f"/api/v1/baselines/{disk.second}/promote", headers=bearer())
        assert answer.status_code == 507, answer.text
        detail = answer.json()["detail"]
        assert "the disk is full" in detail and f"{disk.first} stays active" in detail
        disk.assert_unchanged()
        assert store.baseline_history("clf") == [] or all(b.promoted_at is None for b in store.baseline_history("clf"))
        filler.unlink()
        assert client.post(f"/api/v1/baselines/{disk.second}/promote", headers=bearer()).status_code == 200


def test_a_promotion_log_that_cannot_take_its_line_puts_active_back(disk: Disk) -> None:
    """Room for the new ACTIVE but not for the log's line: ACTIVE is renamed back, the log cut to its size."""
    log = disk.model_dir / baselines.PROMOTIONS_FILE
    page = os.statvfs(disk.where).f_bsize
    with log.open("a") as handle:  # blank lines (the log reader skips them) up to a page boundary
        handle.write("\n" * (-log.stat().st_size % page))
    disk.before = disk.snapshot()
    spare = disk.where / "spare"
    spare.write_bytes(b"s" * page)  # one page, freed after filling: room for the new ACTIVE only
    filler = fill(disk.where)
    spare.unlink()
    with pytest.raises(baselines.NotWritten) as raised:
        baselines.promote(disk.where, disk.second, by="tester")
    print(f"\nMEASURED {raised.value}")
    assert raised.value.disk_full and f"cannot write {log}: the disk is full" in str(raised.value)
    disk.assert_unchanged()
    filler.unlink()
    baselines.promote(disk.where, disk.second, by="tester")
    assert baselines.active_id(disk.where, "clf") == disk.second
    assert baselines.last_promotion(disk.where, "clf", disk.second)["by"] == "tester"  # type: ignore[index]


def test_undoing_a_promotion_on_a_full_disk_says_what_to_run(disk: Disk) -> None:
    """The CLI undoes a promotion the store refused (``baseline_undo.restore``); on a full disk it says how instead."""
    before = baseline_undo.active_state(disk.where, "clf")
    baselines.promote(disk.where, disk.second, by="tester")
    filler = fill(disk.where)
    with pytest.raises(baselines.NotWritten) as raised:
        baseline_undo.restore(before)
    assert f"run `onnxmon baseline promote {disk.first}` once it can be written" in str(raised.value)
    assert not [p.name for p in disk.model_dir.iterdir() if p.name.startswith(".ACTIVE")], "no temporary file left"
    filler.unlink()


def test_promote_on_a_read_only_disk_is_one_line_exit_3_and_500_from_the_api(disk: Disk, tmp_path: Path) -> None:
    """Not full but read-only (a volume remounted ro): the same one line, without "the disk is full"; 500 + detail."""
    import subprocess

    subprocess.run(["mount", "-o", "remount,ro", str(disk.where)], check=True)
    try:
        ran = onnxmon("baseline", "promote", disk.second, "-c", disk.ws.config_file)
        with Store(f"sqlite:///{tmp_path / 'history.db'}") as store:
            store.upgrade()
            client = TestClient(create_app(RealDaemon(with_api(disk.ws.settings(), token=TOKEN), store)))
            answer = client.post(f"/api/v1/baselines/{disk.second}/promote", headers=bearer())
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk.where)], check=True)
    print(f"\nMEASURED exit {ran.exit_code}: {ran.stderr.strip()}; API {answer.status_code} {answer.text}")
    assert ran.exit_code == 3 and len(ran.stderr.strip().splitlines()) == 1
    assert "Read-only file system" in ran.stderr and "disk is full" not in ran.stderr
    assert answer.status_code == 500 and "Read-only file system" in answer.json()["detail"]
    disk.assert_unchanged()
