"""``onnxmon localize`` survives an ONNX Runtime crash as ``check`` does: exit 3 with a message, no segfault.

The issue's crash was ONNX Runtime segfaulting on an fp16 LSTM. This onnxruntime rejects every
malformed LSTM tried here with a clean error, so the crash is brought about the way a native
crash happens: a ``sitecustomize`` on the CLI's ``PYTHONPATH`` makes ``InferenceSession.run`` of
the model named in ``ONNXMON_TEST_SEGFAULT_MODEL`` dereference NULL (a real SIGSEGV, in whichever
process runs the session). The CLI runs as a subprocess, as a user runs it; a CLI that ran ORT in
its own process would die of the signal (exit -11) with nothing printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor import cli
from tests import modelzoo
from tests.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
HOOK = """
import os
_target = os.environ.get("ONNXMON_TEST_SEGFAULT_MODEL")
if _target:
    import ctypes
    import onnxruntime

    _run = onnxruntime.InferenceSession.run

    def _crashing_run(self, *args, **kwargs):
        if str(getattr(self, "_model_path", "") or "").endswith(_target):
            ctypes.string_at(0)  # SIGSEGV, as a native crash inside ONNX Runtime
        return _run(self, *args, **kwargs)

    onnxruntime.InferenceSession.run = _crashing_run
"""


def _onnxmon(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    hook = root / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)]),
        "ONNXMON_TEST_SEGFAULT_MODEL": "lstm.onnx",
    }
    code = f"import sys; from monitor.cli import main; sys.exit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_localize_of_a_model_that_crashes_onnx_runtime_exits_3_naming_the_signal(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("lstm", modelzoo.deep_mlp(seed=1, width=8, layers=4), dims={"batch": 2})
    config = str(ws.write())
    assert cli.main(["baseline", "capture", "lstm", "-c", config, "--quiet", "--intermediates"]) == 0

    checked = _onnxmon(tmp_path, "check", "lstm", "--no-store", "-c", config)
    assert checked.returncode == 3, checked.stdout + checked.stderr  # ground truth: the crash is real
    assert "SIGSEGV" in checked.stdout + checked.stderr

    localized = _onnxmon(tmp_path, "localize", "lstm", "-c", config)
    assert localized.returncode == 3, (localized.returncode, localized.stdout + localized.stderr)
    assert "SIGSEGV" in localized.stderr and "localiz" in localized.stderr
