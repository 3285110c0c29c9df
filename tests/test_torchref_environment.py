"""A PyTorch reference records the ONNX Runtime stack the check runs, not what the torch process mapped.

A CUDA build of torch maps cudart, cuBLAS and cuDNN into the process that makes the reference; a
CPU-only onnxruntime never calls them. Here a CPU torch stands in, and a library *named* like
cuBLASLt (a copy of libz) is loaded into the reference's process before it runs, as a CUDA torch
would: the in-process snapshot shows it (the ground truth that it is mapped), the stored reference
must not, and a check against the reference then sees no environment change.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from monitor.diagnose import evidence
from monitor.results import CheckResult, Reason, Verdict
from tests.conftest import need_torch

FACTORY = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
"""

FAKE_CUDA_LIBRARY = "libcublasLt.so.12"
CHECK = ["check", "m", "--json", "--no-store", "-c", "onnxmon.yaml"]


def _fake_cuda_library(root: Path) -> Path:
    candidates = (Path("/lib/x86_64-linux-gnu/libz.so.1"), Path("/usr/lib/libz.so.1"))
    source = next((p for p in candidates if p.exists()), None)
    if source is None:
        pytest.skip("no libz.so.1 to stand in for a CUDA library")
    target = root / FAKE_CUDA_LIBRARY
    shutil.copyfile(source.resolve(), target)
    return target


def _workspace(root: Path) -> None:
    import torch

    (root / "factory.py").write_text(FACTORY, encoding="utf-8")
    namespace: dict[str, object] = {}
    exec(FACTORY, namespace)  # the same seeded module the reference will build
    module = namespace["make"]()  # type: ignore[operator]
    torch.onnx.export(module, (torch.zeros(2, 4),), str(root / "m.onnx"), input_names=["x"], output_names=["y"],
                      dynamo=False)  # fmt: skip
    rng = np.random.default_rng(3)
    for index in range(2):
        np.savez(root / f"s{index}.npz", x=rng.standard_normal((2, 4)).astype(np.float32))
    (root / "onnxmon.yaml").write_text(
        "store: {url: 'sqlite:///h.db', baselines_dir: baselines, benchsets_dir: benchsets}\n"
        "defaults: {tolerance: {atol: 1.0e-4, rtol: 1.0e-3}, timeout: 60s}\n"
        "benchsets: [{name: inputs, npz: [s0.npz, s1.npz]}]\n"
        "models:\n"
        "  - {name: m, path: m.onnx, benchset: inputs, providers: [CPUExecutionProvider]}\n",
        encoding="utf-8",
    )


@pytest.mark.slow
def test_a_torch_reference_records_no_cuda_library_the_onnx_runtime_side_never_loads(tmp_path: Path) -> None:
    need_torch(onnxscript=False)
    _workspace(tmp_path)
    fake = _fake_cuda_library(tmp_path)
    script = textwrap.dedent(
        f"""
        import ctypes, json, sys
        ctypes.CDLL({str(fake)!r})  # what a CUDA torch does to the process making the reference
        import torch
        from monitor.cli import main
        from monitor.runtime import envsnap
        here = sorted(n for n in envsnap.capture(nvml=None).fields if n.startswith("cuda."))
        code = main(["reference", "torch", "m", "--factory", "factory.py:make", "--json", "-c", "onnxmon.yaml"])
        print("\\nHERE=" + json.dumps(here))
        sys.exit(code)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    here = json.loads(done.stdout.rsplit("HERE=", 1)[1])
    assert "cuda.cublaslt.path" in here  # ground truth: the reference's process has it mapped
    made = json.loads(done.stdout[done.stdout.index("{") : done.stdout.rindex("HERE=")])
    meta = json.loads((Path(made["directory"]) / "baseline.json").read_text(encoding="utf-8"))
    recorded = meta["environment"]["fields"]
    assert not [name for name in recorded if name.startswith("cuda.")]
    assert recorded["onnxruntime.version"]["value"]
    assert "fresh child" in made["environment_source"]

    checked = subprocess.run(
        [sys.executable, "-c", f"import sys; from monitor.cli import main; sys.exit(main({CHECK!r}))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (result,) = json.loads(checked.stdout[checked.stdout.index("[") :])
    assert not [c for c in result["details"].get("env_diff", []) if c["stable"]]


def _failing_run(providers: list[str]) -> CheckResult:
    change = {"field": "cuda.cudnn.version", "old": "9.1.0", "new": None, "stable": True}
    return CheckResult(
        "m",
        Verdict.FAIL,
        0.0,
        1.0,
        reasons=(Reason("atol_rtol", "y: 3.1 x tolerance"),),
        providers_effective=tuple(providers),
        details={"env_diff": [change, {**change, "field": "cuda.runtime.version", "old": "12.4"}]},
    )


def test_diagnose_never_blames_cuda_libraries_when_onnx_runtime_ran_on_the_cpu_only() -> None:
    causes = {h.cause for h in evidence.from_run(_failing_run(["CPUExecutionProvider"]))}
    assert "gpu_library_version" not in causes


def test_diagnose_still_blames_cuda_libraries_when_the_cuda_provider_ran() -> None:
    causes = {h.cause for h in evidence.from_run(_failing_run(["CUDAExecutionProvider", "CPUExecutionProvider"]))}
    assert "gpu_library_version" in causes


def test_no_rule_blames_cuda_libraries_on_a_cpu_session_either() -> None:
    from monitor.knowledge import rules

    run = _failing_run(["CPUExecutionProvider"])
    matched = rules.match(rules.load(), evidence.facts(run))
    assert "gpu_library_version" not in {m.rule.cause for m in matched}
    gpu = _failing_run(["CUDAExecutionProvider"])
    assert "gpu_library_version" in {m.rule.cause for m in rules.match(rules.load(), evidence.facts(gpu))}
