"""The committed example is neutral (issue 41): a newcomer's first check does not start with "environment differs".

The example baseline (``baselines/tinynet/``, what the README's first command checks) was captured on
its author's machine; had it kept that machine's environment snapshot (python 3.11.7, ``OPENBLAS_*``
variables, the CPU), every other machine would differ from it. It records none, so the first check on
any machine compares outputs only, and the status page says the environment was not recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from monitor.files import baselines
from tests.serving import BIN

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_example_records_no_machine_and_its_files_are_intact() -> None:
    example = baselines.active(ROOT / "baselines", "tinynet")
    assert example is not None
    assert dict(example.meta.environment) == {}, "the author's machine, which no newcomer's matches"
    assert example.verify() == []
    text = (example.directory / "baseline.json").read_text(encoding="utf-8")
    for trace in ("OPENBLAS", "python.version", "host.name", "cpu.model"):
        assert trace not in text, trace


@pytest.mark.process
def test_the_first_check_on_another_machine_passes_with_no_environment_change(tmp_path: Path) -> None:
    for item in ("onnxmon.yaml", "examples", "baselines"):
        source = ROOT / item
        if source.is_dir():
            shutil.copytree(source, tmp_path / item, ignore=shutil.ignore_patterns("__pycache__", "*.db"))
        else:
            shutil.copy(source, tmp_path / item)
    elsewhere = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    elsewhere["NVIDIA_TF32_OVERRIDE"] = "0"  # a stable field of the fingerprint: another machine than any before
    done = subprocess.run(
        [str(BIN / "onnxmon"), "check", "-o", "json"], cwd=tmp_path, env=elsewhere, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)
    assert result["verdict"] == "pass" and result["details"]["env_diff"] == [], result["details"]["env_diff"]
