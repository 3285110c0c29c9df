"""File faults under a running daemon: tampered benchmark sets and model files hurt one model only.

Each case tampers with the files of ``clf`` after its baseline was captured, runs the real
isolated check of both models and asserts ``clf`` gets the right verdict and reason (naming
the file) while ``spin`` still passes, and that both results are recorded. Check children
run under ``daemon.memory_limit_mb``, so a reader that allocated what a forged header
declares would crash the child instead of reporting ``benchset_error``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from numpy.lib import format as npy_format

from monitor.daemon.root import Daemon
from monitor.results import Verdict
from monitor.store import Store
from tests import modelzoo
from tests.serving import two_models
from tests.workspace import Workspace

pytestmark = pytest.mark.process

MEMORY_LIMIT_MB = 2048
HUGE_SHAPE = (2**20, 2**20)  # 4 TiB of float32 declared by a 200-byte file


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture
def daemon(ws: Workspace) -> Iterator[Daemon]:
    two_models(ws)
    ws.extra["daemon"]["memory_limit_mb"] = MEMORY_LIMIT_MB
    settings = ws.settings()
    store = Store(settings.store.url)
    store.upgrade()
    instance = Daemon(settings, store=store)
    yield instance
    instance.stop()
    store.close()


def _edit_manifest(version_dir: Path, **tensor0: object) -> None:
    path = version_dir / "manifest.yaml"
    manifest = yaml.safe_load(path.read_text())
    manifest["samples"][0]["tensors"][0].update(tensor0)
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))


def corrupt(version_dir: Path, outside: Path) -> str:
    (version_dir / "s00000_0.npy").write_bytes(b"\x00garbage, not an array" * 8)
    return "s00000_0.npy"


def truncate(version_dir: Path, outside: Path) -> str:
    path = version_dir / "s00000_0.npy"
    path.write_bytes(path.read_bytes()[:100])
    return "s00000_0.npy"


def pickle_bearing(version_dir: Path, outside: Path) -> str:
    with (version_dir / "s00000_0.npy").open("wb") as handle:
        np.save(handle, np.array([{"payload": "os.system"}], dtype=object), allow_pickle=True)
    return "s00000_0.npy"


def escaping_path(version_dir: Path, outside: Path) -> str:
    _edit_manifest(version_dir, file="../../../outside.npy")
    return "../../../outside.npy"


def symlink_outside(version_dir: Path, outside: Path) -> str:
    target = version_dir / "s00000_0.npy"
    os.replace(target, outside)  # a valid array, with the right checksum, but outside the set
    target.symlink_to(outside)
    return "s00000_0.npy"


def huge_declared_shape(version_dir: Path, outside: Path) -> str:
    _edit_manifest(version_dir, shape=list(HUGE_SHAPE))
    with (version_dir / "s00000_0.npy").open("wb") as handle:
        npy_format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": HUGE_SHAPE})
        handle.write(b"\x00" * 64)
    return "s00000_0.npy"


def fifo_in_place(version_dir: Path, outside: Path) -> str:
    """A named pipe where a tensor belongs: reading it would block until the check's hard timeout."""
    target = version_dir / "s00000_0.npy"
    target.unlink()
    os.mkfifo(target)
    return "s00000_0.npy"


@pytest.mark.parametrize(
    "tamper", [corrupt, truncate, pickle_bearing, escaping_path, symlink_outside, huge_declared_shape, fifo_in_place]
)
def test_a_tampered_benchset_is_a_benchset_error_naming_the_file_and_the_other_model_passes(
    ws: Workspace, daemon: Daemon, tamper: Callable[[Path, Path], str]
) -> None:
    named = tamper(ws.root / "benchsets" / "clf-bench" / "v1", ws.root / "outside.npy")
    broken = daemon.run_now("clf")
    assert broken.verdict is Verdict.ERROR
    assert [r.code for r in broken.reasons] == ["benchset_error"], broken.reasons
    assert named in broken.reasons[0].detail
    assert daemon.run_now("spin").verdict is Verdict.PASS
    assert_recorded(daemon, clf="error", spin="pass")


def missing(path: Path) -> None:
    path.unlink()


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:200])


def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def replaced(path: Path) -> None:
    modelzoo.save(modelzoo.classifier(seed=1), path)


@pytest.mark.parametrize(
    ("damage", "verdict", "code"),
    [
        (missing, Verdict.ERROR, "model_error"),
        (truncated, Verdict.ERROR, "model_error"),
        (fifo, Verdict.ERROR, "model_error"),
        (replaced, Verdict.FAIL, "model_changed"),
    ],
)
def test_a_model_file_changed_under_the_daemon_gets_its_verdict_and_the_other_model_passes(
    ws: Workspace, daemon: Daemon, damage: Callable[[Path], None], verdict: Verdict, code: str
) -> None:
    assert daemon.run_now("clf").verdict is Verdict.PASS
    damage(ws.root / "models" / "clf.onnx")
    changed = daemon.run_now("clf")
    assert changed.verdict is verdict
    assert code in {r.code for r in changed.reasons}, changed.reasons
    if verdict is Verdict.ERROR:
        assert "clf.onnx" in changed.reasons[0].detail
    assert daemon.run_now("spin").verdict is Verdict.PASS
    assert_recorded(daemon, clf=verdict.value, spin="pass")


def assert_recorded(daemon: Daemon, **latest: str) -> None:
    """The latest stored verdict of each model (every result reached the database)."""
    assert {r.model: str(r.verdict) for r in daemon.store.latest_per_model()} == latest
