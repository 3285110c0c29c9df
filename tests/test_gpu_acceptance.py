"""The GPU acceptance and its staging, rehearsed on this CPU machine.

``scripts/gpu-acceptance`` must be a clean run here: exit 0, every GPU step ``skip`` with its reason.
``scripts/gpu-stage`` must bring a file in parts and give back the same bytes, or name the part that
is missing or damaged before anything is installed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import onnxruntime as ort
import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent
GPU_STEPS = {
    "cuda_provider",
    "cpu_fallback_probe",
    "check_on_cuda",
    "tf32",
    "cudnn_algo_search",
    "tensorrt_caches",
    "nvml",
    "warm_worker_memory",
}


def script(name: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_the_acceptance_without_a_gpu_skips_every_gpu_step_with_its_reason(tmp_path: Path) -> None:
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("a GPU build of onnxruntime: this test is for machines without one")
    report_path = tmp_path / "r.json"
    done = script("gpu-acceptance", "--json", str(report_path))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    steps = {s["name"]: s for s in report["steps"]}
    assert len(steps) >= 6 and set(steps) >= GPU_STEPS
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skip" and steps[name]["gpu"], steps[name]
        assert "CUDAExecutionProvider" in steps[name]["reason"], "the reason names what is missing"
    assert (
        steps["environment"]["status"] == "pass" and steps["environment"]["figures"]["onnxruntime"] == ort.__version__
    )
    assert report["seconds"] < 60


@pytest.mark.slow
def test_the_cpu_rehearsal_runs_the_check_the_baseline_and_a_warm_worker(tmp_path: Path) -> None:
    steps = "environment,cuda_provider,check_on_cuda,cudnn_algo_search,warm_worker_memory"
    done = script("gpu-acceptance", "--cpu-rehearsal", "--only", steps, "--json", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = {s["name"]: s for s in json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["steps"]}
    assert all(s["status"] == "pass" for s in report.values()), report
    assert report["check_on_cuda"]["figures"]["verdict"] == "pass"
    worker = report["warm_worker_memory"]["figures"]
    assert worker["default_worker_pid_1"] == worker["default_worker_pid_2"], "the same warm worker ran both checks"


def dummy_wheel(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def test_a_file_split_into_parts_joins_back_to_the_same_sha256(tmp_path: Path) -> None:
    wheel = dummy_wheel(tmp_path / "onnxruntime_gpu-0.0.0-cp312-cp312-linux_x86_64.whl", 2 * 2**20 + 12345)
    stage = tmp_path / "stage"
    done = script("gpu-stage", "--stage", str(stage), "pack", str(wheel), "--part-mib", "1")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((stage / "manifest.json").read_text(encoding="utf-8"))
    (entry,) = manifest["files"]
    assert [p["size"] for p in entry["parts"]] == [2**20, 2**20, 12345]
    assert all(p.stat().st_size <= 60 * 2**20 for p in (stage / "parts").iterdir())
    assert script("gpu-stage", "--stage", str(stage), "status").returncode == 0
    done = script("gpu-stage", "--stage", str(stage), "join", "--into", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / wheel.name).read_bytes() == wheel.read_bytes()


def test_a_missing_or_damaged_part_is_named_before_anything_is_joined(tmp_path: Path) -> None:
    wheel = dummy_wheel(tmp_path / "w.whl", 3 * 2**20)
    stage = tmp_path / "stage"
    script("gpu-stage", "--stage", str(stage), "pack", str(wheel), "--part-mib", "1")
    (stage / "parts" / "w.whl.part01").unlink()
    part = stage / "parts" / "w.whl.part02"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    status = script("gpu-stage", "--stage", str(stage), "status")
    assert (
        status.returncode == 1
        and "w.whl.part01 (missing)" in status.stdout
        and "w.whl.part02 (damaged" in status.stdout
    )
    joined = script("gpu-stage", "--stage", str(stage), "join", "--into", str(tmp_path / "out"))
    assert joined.returncode != 0 and "part01" in joined.stderr and not (tmp_path / "out").exists()


def pure_wheel(folder: Path, name: str) -> Path:
    """A minimal pure-Python wheel (one module), built with the standard library: what pip installs."""
    version = "0.0.0"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"STAGED = True\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.mark.slow
def test_the_whole_staged_path_installs_the_wheel_points_at_the_cuda_libraries_and_runs_the_acceptance(
    tmp_path: Path,
) -> None:
    """The GPU machine's path, rehearsed here: pack, status, then `accept` joins, pip-installs the wheel
    into the interpreter running it, points LD_LIBRARY_PATH at the nvidia-* wheels' lib folders (here an
    empty stand-in for torch's) and runs scripts/gpu-acceptance with that environment."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # onnxmon's dependencies (numpy, onnx, onnxruntime) from this interpreter, after the venv's own
    (site_packages / "tests-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    cuda_libs = site_packages / "nvidia" / "cublas" / "lib"
    cuda_libs.mkdir(parents=True)
    stage = tmp_path / "stage"
    wheel = pure_wheel(tmp_path, "onnxmon_stage_probe")
    stage_script = [str(python), str(ROOT / "scripts" / "gpu-stage"), "--stage", str(stage)]
    packed = subprocess.run([*stage_script, "pack", str(wheel)], capture_output=True, text=True, timeout=60)
    assert packed.returncode == 0, packed.stderr
    assert subprocess.run([*stage_script, "status"], capture_output=True, timeout=60).returncode == 0
    report = tmp_path / "r.json"
    accepted = subprocess.run(
        [*stage_script, "accept", "--", "--only", "environment", "--json", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert accepted.returncode == 0, accepted.stdout[-3000:] + accepted.stderr[-3000:]
    assert (site_packages / "onnxmon_stage_probe" / "__init__.py").is_file(), "installed into the running venv"
    assert f"onnxruntime {ort.__version__}" in accepted.stdout and "CUDA library folders: 1" in accepted.stdout
    (step,) = json.loads(report.read_text(encoding="utf-8"))["steps"]
    assert step["name"] == "environment" and step["status"] == "pass"
    assert step["figures"]["cuda_library_dirs"] == [str(cuda_libs)], "the acceptance runs with the loader path"


def test_parts_above_60_mib_are_refused(tmp_path: Path) -> None:
    done = script(
        "gpu-stage", "--stage", str(tmp_path), "pack", str(dummy_wheel(tmp_path / "w.whl", 10)), "--part-mib", "64"
    )
    assert done.returncode == 2 and "60" in done.stderr


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("gpu-acceptance", ["--only", "tf32,tf23"], "--only names no step tf23: the steps are environment,"),
        ("gpu-acceptance", ["--json", "/nonexistent/onnxmon/r.json"], "--json /nonexistent/onnxmon/r.json: its folder"),
        (
            "gpu-stage",
            ["pack", "/nonexistent/onnxruntime_gpu.whl"],
            "pack: /nonexistent/onnxruntime_gpu.whl is not a file",
        ),
    ],
    ids=["misspelt-step", "report-folder", "missing-wheel"],
)
def test_a_usage_mistake_is_one_line_and_exit_2_before_anything_runs(
    tmp_path: Path, name: str, args: list[str], message: str
) -> None:
    """On a brief GPU machine a misspelt --only must not pass for a green run of nothing, nor a report
    path fail after minutes of measuring."""
    done = script(name, *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "[gpu-acceptance]" not in done.stdout, "no step ran"


def test_the_staging_folder_is_ignored_by_git() -> None:
    done = subprocess.run(
        ["git", "check-ignore", ".gpu-stage/parts/x.part00"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, "parts must travel only when a call carries them"
