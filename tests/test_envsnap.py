"""Environment snapshots: what is captured, what is fingerprinted, how changes are reported.

Real captures run on this machine (no GPU). Hardware we lack is stood in for by a small
fake NVML object, and by tiny C libraries (compiled here) that export the CUDA / NVML
version entry points, so the ctypes paths run for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime
import pytest
import typer
from typer.testing import CliRunner

from monitor.cli import env_cmd
from monitor.errors import MonitorError
from monitor.runtime import cpu, envsnap
from monitor.runtime.cudalibs import mapped_libraries
from monitor.runtime.envsnap import EnvSnapshot, Field, FieldChange
from monitor.runtime.gpu import CtypesNvml, decode_clock_event_reasons, nvml_entries

FIXTURES = Path(__file__).parent / "fixtures" / "envsnap"
REPO = Path(__file__).resolve().parent.parent


# --- a fake NVML, for GPUs this machine does not have ------------------------------------------


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeMemory:
    total: int
    used: int


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-11111111"
    capability: tuple[int, int] = (9, 0)
    ecc: int | None = 1  # None: NVML_ERROR_NOT_SUPPORTED
    temperature_c: int = 40
    sm_clock_mhz: int = 1980
    reasons: int = 0


class FakeNvml:
    """Implements ``NvmlLike`` over a list of fake boards; ``fail_init`` mimics a missing driver."""

    def __init__(self, gpus: list[FakeGpu], driver: str = "570.86.15", fail_init: bool = False) -> None:
        self.gpus, self.driver, self.fail_init = gpus, driver, fail_init

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError(9)  # NVML_ERROR_DRIVER_NOT_LOADED

    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu, /) -> bytes:
        return handle.name.encode()  # old pynvml returned bytes

    def nvmlDeviceGetUUID(self, handle: FakeGpu, /) -> str:
        return handle.uuid

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeGpu, /) -> tuple[int, int]:
        return handle.capability

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, /) -> FakeMemory:
        return FakeMemory(total=143771 * 2**20, used=512 * 2**20)

    def nvmlDeviceGetEccMode(self, handle: FakeGpu, /) -> list[int]:
        if handle.ecc is None:
            raise FakeNvmlError(3)
        return [handle.ecc, handle.ecc]

    def nvmlDeviceGetMigMode(self, handle: FakeGpu, /) -> list[int]:
        return [0, 0]

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock_type: int, /) -> int:
        return handle.sm_clock_mhz if clock_type == 1 else 3201

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int, /) -> int:
        return handle.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu, /) -> int:
        return 250_500

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpu, /) -> int:
        return handle.reasons


def snap(
    nvml: FakeNvml | None = None, environ: Mapping[str, str] | None = None, proc_root: Path | None = None
) -> EnvSnapshot:
    return envsnap.capture(
        nvml=nvml, environ=environ or {}, proc_root=proc_root or Path("/proc"), sys_root=FIXTURES / "sys"
    )


def strings(value: object) -> list[str]:
    assert isinstance(value, list)
    return value


def values(snapshot: EnvSnapshot, prefix: str) -> dict[str, Any]:
    return {name: f.value for name, f in snapshot.fields.items() if name.startswith(prefix)}


# --- CPU, cgroup, maps: parsed from fixtures ----------------------------------------------------


@pytest.mark.parametrize(
    ("cpuinfo", "model", "flags"),
    [
        (
            "x86_avx512_cascadelake.txt",
            "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
            ["avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni"],
        ),
        (
            "x86_amx_sapphirerapids.txt",
            "Intel(R) Xeon(R) Platinum 8488C",
            [
                *("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"),
                *("avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8"),
            ],
        ),
        ("arm_graviton3.txt", "ARM Neoverse-V1", ["asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve"]),
    ],
)
def test_cpu_model_and_kernel_selecting_isa_flags_are_read_from_cpuinfo(
    cpuinfo: str, model: str, flags: list[str]
) -> None:
    entries = cpu.cpuinfo_entries((FIXTURES / "cpuinfo" / cpuinfo).read_text())
    assert entries["cpu.model"] == (model, True)
    assert entries["cpu.flags"] == (flags, True)


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({"fs/cgroup/cpu.max": "250000 100000\n"}, 2.5),
        ({"fs/cgroup/cpu.max": "max 100000\n"}, None),
        ({"fs/cgroup/kubepods/pod1/cpu.max": "50000 100000\n", "fs/cgroup/cpu.max": "max 100000\n"}, 0.5),
        ({"fs/cgroup/cpu/cpu.cfs_quota_us": "150000\n", "fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 1.5),
        ({"fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n", "fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_quota_is_read_as_cores_from_v2_or_v1(
    tmp_path: Path, files: dict[str, str], cores: float | None
) -> None:
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/kubepods/pod1\n")
    for name, text in files.items():
        (tmp_path / "sys" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "sys" / name).write_text(text)
    assert cpu.cpu_quota_cores(tmp_path / "proc", tmp_path / "sys") == cores


def test_capture_reads_cpu_and_quota_under_the_injected_roots() -> None:
    snapshot = snap(proc_root=FIXTURES / "proc")
    assert snapshot.get("cpu.model") == "Intel(R) Xeon(R) Platinum 8488C"
    assert "amx_int8" in strings(snapshot.get("cpu.flags"))
    assert snapshot.get("cpu.quota_cores") == 2.5


def test_cuda_libraries_are_found_in_a_maps_file_and_deleted_ones_skipped() -> None:
    found = mapped_libraries((FIXTURES / "proc" / "self" / "maps").read_text())
    assert sorted(found) == [
        "libcublas.so.12.4.5.8",
        "libcublasLt.so.12.4.5.8",
        "libcudart.so.12.4.127",
        "libcudnn.so.9",
        "libcudnn_ops.so.9",
    ]


def test_cuda_libraries_not_loaded_in_this_process_are_recorded_but_never_loaded() -> None:
    snapshot = snap(proc_root=FIXTURES / "proc")
    assert snapshot.get("cuda.cudnn.path") == "/usr/local/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
    assert snapshot.fields["cuda.runtime.path"].stable is False
    assert snapshot.get("cuda.runtime.version") is None
    assert "runtime" in str(snapshot.get("cuda.error"))


# --- CUDA libraries really loaded: compiled stand-ins -------------------------------------------


def compile_library(source: Path, target: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the CUDA/NVML stand-in libraries")
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-o", str(target), str(source)], check=True, timeout=60)
    return target


CUDA_STAND_INS = ("libcudart.so.99", "libcudnn.so.99", "libcublas.so.99", "libcublasLt.so.99", "libnvinfer.so.99")


@pytest.mark.process
def test_versions_of_cuda_libraries_loaded_in_the_process_are_asked_from_the_libraries(tmp_path: Path) -> None:
    paths = [str(compile_library(FIXTURES / "fake_cuda.c", tmp_path / name)) for name in CUDA_STAND_INS]
    code = (
        "import ctypes, json, sys\n"
        "for path in sys.argv[1:]: ctypes.CDLL(path)\n"
        "from monitor.runtime.envsnap import capture\n"
        "print(json.dumps(capture(nvml=None).to_dict()))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, *paths], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    snapshot = EnvSnapshot.from_dict(json.loads(run.stdout))
    assert values(snapshot, "cuda.") | {"cuda.loaded_libraries": None} == {
        "cuda.loaded_libraries": None,
        "cuda.runtime.path": paths[0],
        "cuda.runtime.version": "12.4",
        "cuda.runtime.version_raw": 12040,
        "cuda.cudnn.path": paths[1],
        "cuda.cudnn.version": "9.3.0",
        "cuda.cudnn.version_raw": 90300,
        "cuda.cublas.path": paths[2],
        "cuda.cublas.version": "12.4.5",
        "cuda.cublas.version_raw": 120405,
        "cuda.cublaslt.path": paths[3],
        "cuda.cublaslt.version": "12.4.5",
        "cuda.cublaslt.version_raw": 120405,
        "cuda.tensorrt.path": paths[4],
        "cuda.tensorrt.version": "10.3.0",
        "cuda.tensorrt.version_raw": 100300,
    }


@pytest.mark.process
def test_a_cuda_library_on_disk_but_not_loaded_stays_unloaded(tmp_path: Path) -> None:
    library = compile_library(FIXTURES / "fake_cuda.c", tmp_path / "libcudart.so.98")
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "cpuinfo").write_text("")
    (proc / "self" / "maps").write_text(f"7f00-7f01 r-xp 00000000 00:2f 1 {library}\n")
    snapshot = snap(proc_root=proc)
    assert snapshot.get("cuda.runtime.path") == str(library)
    assert snapshot.get("cuda.runtime.version") is None
    assert str(library) not in Path("/proc/self/maps").read_text()


# --- NVML ----------------------------------------------------------------------------------------


def test_no_gpu_means_no_gpu_fields_and_no_crash() -> None:
    for nvml in (None, FakeNvml([], fail_init=True)):
        snapshot = snap(nvml)
        assert values(snapshot, "gpu.") == {}
    assert "NVML unavailable" in str(snap(FakeNvml([], fail_init=True)).get("nvml.error"))


def test_one_gpu_reports_its_kind_as_stable_and_its_state_as_volatile() -> None:
    snapshot = snap(FakeNvml([FakeGpu(ecc=None)]))
    assert values(snapshot, "gpu.") == {
        "gpu.count": 1,
        "gpu.0.name": "NVIDIA H200",
        "gpu.0.uuid": "GPU-11111111",
        "gpu.0.compute_capability": "9.0",
        "gpu.0.memory_total_mib": 143771,
        "gpu.0.memory_used_mib": 512,
        "gpu.0.ecc": "unsupported",
        "gpu.0.mig": "disabled",
        "gpu.0.sm_clock_mhz": 1980,
        "gpu.0.mem_clock_mhz": 3201,
        "gpu.0.temperature_c": 40,
        "gpu.0.power_w": 250.5,
        "gpu.0.clock_event_reasons": [],
    }
    stable = {name for name, f in snapshot.fields.items() if name.startswith("gpu.") and f.stable}
    assert stable == {"gpu.count", "gpu.0.name", "gpu.0.compute_capability", "gpu.0.memory_total_mib"} | {
        "gpu.0.ecc",
        "gpu.0.mig",
    }
    assert snapshot.get("nvml.driver_version") == "570.86.15"
    assert snapshot.get("nvml.cuda_driver_version") == "12.8"


def test_two_gpus_are_numbered_and_throttling_reasons_are_decoded_to_names() -> None:
    snapshot = snap(FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-2", reasons=0x4 | 0x40)]))
    assert snapshot.get("gpu.count") == 2
    assert snapshot.get("gpu.0.clock_event_reasons") == []
    assert snapshot.get("gpu.1.clock_event_reasons") == ["sw_power_cap", "hw_thermal_slowdown"]
    assert snapshot.get("gpu.1.uuid") == "GPU-2"


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0, []),
        (0x1, ["gpu_idle"]),
        (0x8 | 0x80, ["hw_slowdown", "hw_power_brake_slowdown"]),
        (0x20 | (1 << 40), ["sw_thermal_slowdown", "unknown_0x10000000000"]),
    ],
)
def test_clock_event_reason_masks_decode_to_names(mask: int, names: list[str]) -> None:
    assert decode_clock_event_reasons(mask) == names


@pytest.mark.process
def test_the_ctypes_nvml_adapter_marshals_the_c_abi(tmp_path: Path) -> None:
    library = compile_library(FIXTURES / "fake_nvml.c", tmp_path / "libnvidia-ml.so.1")
    entries = {name: value for name, (value, _) in nvml_entries(CtypesNvml(str(library))).items()}
    assert entries["nvml.driver_version"] == "580.82.07"
    assert entries["nvml.cuda_driver_version"] == "13.0"
    assert entries["gpu.count"] == 2
    assert [entries["gpu.0.uuid"], entries["gpu.1.uuid"]] == ["GPU-aaaaaaaa", "GPU-bbbbbbbb"]
    assert entries["gpu.0.name"] == "NVIDIA H200"
    assert entries["gpu.0.compute_capability"] == "9.0"
    assert (entries["gpu.0.memory_total_mib"], entries["gpu.0.memory_used_mib"]) == (143771, 1024)
    assert (entries["gpu.0.ecc"], entries["gpu.1.ecc"], entries["gpu.0.mig"]) == ("enabled", "unsupported", "disabled")
    assert (entries["gpu.0.sm_clock_mhz"], entries["gpu.0.mem_clock_mhz"]) == (1980, 3201)
    assert (entries["gpu.0.temperature_c"], entries["gpu.0.power_w"]) == (41, 123.5)
    assert entries["gpu.0.clock_event_reasons"] == ["sw_power_cap", "hw_thermal_slowdown", "unknown_0x10000000000"]
    assert "gpu.0.error" not in entries and "nvml.error" not in entries


def test_the_ctypes_nvml_adapter_without_a_driver_reports_nvml_unavailable() -> None:
    entries = nvml_entries(CtypesNvml("libnvidia-ml-that-does-not-exist.so.1"))
    assert list(entries) == ["nvml.error"]


# --- fingerprint, diff, summary -----------------------------------------------------------------


def test_the_fingerprint_ignores_volatile_fields() -> None:
    cool = snap(FakeNvml([FakeGpu(temperature_c=35, sm_clock_mhz=1980)]), {"POD_NAME": "mon-1"})
    hot = snap(FakeNvml([FakeGpu(temperature_c=83, sm_clock_mhz=1410, uuid="GPU-9", reasons=0x40)]), {"POD_NAME": "x"})
    assert cool.fingerprint == hot.fingerprint
    changed = {c.field for c in envsnap.diff(cool, hot)}
    assert {"gpu.0.temperature_c", "gpu.0.sm_clock_mhz", "gpu.0.uuid", "k8s.pod"} <= changed
    assert all(not c.stable for c in envsnap.diff(cool, hot))


def test_a_driver_change_changes_the_fingerprint_and_diff_names_it_first() -> None:
    before = snap(FakeNvml([FakeGpu(temperature_c=35)], driver="570.86.15"))
    after = snap(FakeNvml([FakeGpu(temperature_c=60)], driver="575.51.03"))
    assert before.fingerprint != after.fingerprint
    assert envsnap.diff(before, after)[0] == FieldChange("nvml.driver_version", "570.86.15", "575.51.03", True)


def test_an_onnxruntime_upgrade_changes_the_fingerprint_and_is_summarized() -> None:
    before = snap()
    after = EnvSnapshot({**before.fields, "onnxruntime.version": Field("9.9.9", True)})
    assert before.fingerprint != after.fingerprint
    changes = envsnap.diff(before, after)
    assert changes == [FieldChange("onnxruntime.version", onnxruntime.__version__, "9.9.9", True)]
    assert envsnap.summary(changes) == f"onnxruntime {onnxruntime.__version__} → 9.9.9"


def test_a_release_change_lists_the_version_before_the_build_string() -> None:
    # issue 23: onnxruntime.build_info (a ~300-character cmake string) sorted before onnxruntime.version,
    # and a line cut at its width lost the version
    before = snap()
    after = EnvSnapshot(
        {
            **before.fields,
            "onnxruntime.build_info": Field("ORT Build Info: git-branch=rel-1.20.1, " + "x" * 300, True),
            "onnxruntime.version": Field("1.20.1", True),
            "cpu.load1": Field(9.5, False),
        }
    )
    fields = [c.field for c in envsnap.diff(before, after)]
    assert fields.index("onnxruntime.version") < fields.index("onnxruntime.build_info") < fields.index("cpu.load1")
    stored = [{"field": "onnxruntime.build_info", "old": "a", "new": "b"}, {"field": "onnxruntime.version"}]
    assert [d["field"] for d in envsnap.ordered(stored)] == ["onnxruntime.version", "onnxruntime.build_info"]


def test_env_diff_leaves_volatile_fields_out_unless_asked(cli: typer.Typer, tmp_path: Path) -> None:
    before = snap(FakeNvml([FakeGpu(temperature_c=35)], driver="570.86.15"))
    after = snap(FakeNvml([FakeGpu(temperature_c=70)], driver="575.51.03"))
    (tmp_path / "a.json").write_text(json.dumps(before.to_dict()))
    (tmp_path / "b.json").write_text(json.dumps(after.to_dict()))
    args = ["env", "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    shown = CliRunner().invoke(cli, args)
    assert "temperature" not in shown.output and "volatile field(s) changed too" in shown.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert all(c["stable"] for c in data["changes"]) and data["volatile_hidden"] >= 1
    every = CliRunner().invoke(cli, [*args, "--volatile"])
    assert "gpu.0.temperature_c" in every.output


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ([], "no environment change"),
        (
            [
                FieldChange("onnxruntime.version", "1.17.0", "1.18.0", True),
                FieldChange("cuda.cudnn.version", "9.1.0", "9.3.0", True),
            ],
            "onnxruntime 1.17.0 → 1.18.0, cudnn 9.1.0 → 9.3.0",
        ),
        ([FieldChange("cuda.cudnn.version", None, "9.3.0", True)], "cudnn none → 9.3.0"),
        ([FieldChange("gpu.0.temperature_c", 40, 80, False)], "no environment change"),
        ([FieldChange("cpu.flags", ["avx2"], ["avx2", "avx512f"], True)], "cpu.flags avx2 → avx2,avx512f"),
    ],
)
def test_summary_is_one_line_of_stable_changes(changes: list[FieldChange], text: str) -> None:
    assert envsnap.summary(changes) == text


def test_the_fingerprint_is_sha256_of_canonical_json_of_stable_fields_only() -> None:
    snapshot = EnvSnapshot({"b.version": Field("2", True), "a.list": Field(["x"], True), "t": Field(40, False)})
    expected = hashlib.sha256(b'{"a.list":["x"],"b.version":"2"}').hexdigest()
    assert snapshot.fingerprint == expected
    assert envsnap.short(snapshot.fingerprint) == expected[:16]


def test_to_dict_and_from_dict_round_trip_through_json() -> None:
    snapshot = snap(FakeNvml([FakeGpu(), FakeGpu(reasons=0x4)]), {"ORT_TUNABLE_OP_ENABLE": "1"})
    data = json.loads(json.dumps(snapshot.to_dict()))
    assert data["fingerprint"] == snapshot.fingerprint
    again = EnvSnapshot.from_dict(data)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z", data["captured_at"]), "RFC 3339 UTC"
    assert again == snapshot
    assert EnvSnapshot.from_dict(data | {"captured_at": snapshot.captured_at}) == snapshot, "epoch seconds still read"
    assert again.fingerprint == snapshot.fingerprint
    assert envsnap.diff(snapshot, again) == []


# --- environment variables and Kubernetes identity ----------------------------------------------


def test_numeric_environment_variables_are_stable_and_others_ignored() -> None:
    environ = {
        "NVIDIA_TF32_OVERRIDE": "0",
        "ORT_TENSORRT_FP16_ENABLE": "1",
        "ORT_DISABLE_FLASH_ATTENTION": "1",
        "CUDNN_LOGINFO_DBG": "0",
        "OMP_NUM_THREADS": "4",
        "HOME": "/root",
        "ONNXMON_NODE_NAME": "gpu-node-7",
        "NODE_NAME": "ignored-when-onnxmon-one-set",
        "POD_NAME": "onnxmon-abc",
        "POD_NAMESPACE": "ml",
        "ONNXMON_IMAGE_DIGEST": "sha256:feed",
    }
    snapshot = snap(environ=environ)
    assert values(snapshot, "env.") == {
        "env.NVIDIA_TF32_OVERRIDE": "0",
        "env.ORT_TENSORRT_FP16_ENABLE": "1",
        "env.ORT_DISABLE_FLASH_ATTENTION": "1",
        "env.CUDNN_LOGINFO_DBG": "0",
        "env.OMP_NUM_THREADS": "4",
    }
    assert all(snapshot.fields[name].stable for name in values(snapshot, "env."))
    assert values(snapshot, "k8s.") == {
        "k8s.node": "gpu-node-7",
        "k8s.pod": "onnxmon-abc",
        "k8s.namespace": "ml",
        "k8s.image_digest": "sha256:feed",
    }
    assert not any(snapshot.fields[name].stable for name in values(snapshot, "k8s."))
    assert snap(environ={**environ, "NVIDIA_TF32_OVERRIDE": "1"}).fingerprint != snapshot.fingerprint


# --- the real machine ---------------------------------------------------------------------------


def test_real_capture_on_this_machine_works_without_gpu_or_pynvml() -> None:
    for nvml in (None, envsnap._Default.AUTO):
        snapshot = envsnap.capture(nvml=nvml)
        assert snapshot.get("onnxruntime.version") == onnxruntime.__version__
        assert "CPUExecutionProvider" in strings(snapshot.get("onnxruntime.providers"))
        assert snapshot.get("onnxruntime.package")
        assert snapshot.get("python.version")
        assert snapshot.get("cpu.logical_cores") == os.cpu_count()
        assert not [name for name in snapshot.fields if name.endswith(".error") and not name.startswith("nvml.")]
        assert len(snapshot.fingerprint) == 64


def test_a_failing_part_is_recorded_as_an_error_field_not_raised(tmp_path: Path) -> None:
    snapshot = snap(proc_root=tmp_path / "missing")
    assert "FileNotFoundError" in str(snapshot.get("cpu.error"))
    assert "FileNotFoundError" in str(snapshot.get("cuda.error"))
    assert snapshot.fields["cpu.error"].stable is False
    assert snapshot.get("onnxruntime.version") == onnxruntime.__version__


# --- CLI: onnxmon env show|diff ------------------------------------------------------------------


@pytest.fixture
def cli() -> typer.Typer:
    app = typer.Typer()
    env_cmd.register(app)
    app.command("noop")(lambda: None)  # keep "env" a subcommand group
    return app


def test_env_show_prints_sections_and_json_with_a_fingerprint(cli: typer.Typer) -> None:
    table = CliRunner().invoke(cli, ["env", "show"])
    assert table.exit_code == 0, table.output
    assert "[onnxruntime]" in table.output and "[cpu]" in table.output
    assert "stable" in table.output and "volatile" in table.output
    shown = CliRunner().invoke(cli, ["env", "show", "--json"])
    assert len(json.loads(shown.output)["fingerprint"]) == 64


def test_env_diff_of_two_files_lists_changes_and_exits_one_when_the_fingerprint_differs(
    cli: typer.Typer, tmp_path: Path
) -> None:
    before = snap(FakeNvml([FakeGpu()], driver="570.86.15"))
    after = snap(FakeNvml([FakeGpu(temperature_c=70)], driver="575.51.03"))
    (tmp_path / "a.json").write_text(json.dumps(before.to_dict()))
    (tmp_path / "b.json").write_text(json.dumps({"model": "m", "environment": after.to_dict()}))  # a check result
    result = CliRunner().invoke(cli, ["env", "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert result.exit_code == 1
    assert "nvml.driver_version  570.86.15 → 575.51.03" in result.output
    assert result.output.strip().endswith("driver 570.86.15 → 575.51.03")
    same = CliRunner().invoke(cli, ["env", "diff", "--json", str(tmp_path / "a.json"), str(tmp_path / "a.json")])
    assert same.exit_code == 0 and json.loads(same.output)["changes"] == []


def test_resolve_snapshot_asks_the_lookups_for_fingerprints_and_explains_unknown_refs(tmp_path: Path) -> None:
    known = snap()
    store = {known.fingerprint: known.to_dict()}
    assert env_cmd.resolve_snapshot(known.fingerprint, [store.get]) == known
    with pytest.raises(MonitorError, match="no such snapshot"):
        env_cmd.resolve_snapshot("0123abcd", [store.get])
    (tmp_path / "broken.json").write_text('{"fields": 3}')
    with pytest.raises(MonitorError, match=r"broken\.json: not an environment snapshot"):
        env_cmd.resolve_snapshot(str(tmp_path / "broken.json"))


# --- scripts/gpu-check --------------------------------------------------------------------------


@pytest.mark.process
def test_gpu_check_script_runs_on_a_cpu_machine_and_says_no_gpu() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu-check")], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no GPU" in run.stdout
    assert "fingerprint" in run.stdout


def test_a_field_an_older_onnxmon_did_not_record_appearing_is_shown_but_not_a_stack_change() -> None:
    """A baseline captured before onnxmon recorded ``onnxruntime.ep_packages`` (or a GPU's SM count) must
    not make every later check look like a changed stack: the field is shown, never attributed."""
    now = envsnap.capture()
    assert now.fields["onnxruntime.ep_packages"].stable
    older = EnvSnapshot({n: f for n, f in now.fields.items() if n != "onnxruntime.ep_packages"})
    (change,) = envsnap.diff(older, now)
    assert change.field == "onnxruntime.ep_packages" and change.stable is False
    gpu = {"gpu.0.name": Field("NVIDIA H100", True), "gpu.0.sm_count": Field(132, True)}
    (sm,) = envsnap.diff(EnvSnapshot({"gpu.0.name": Field("NVIDIA H100", True)}), EnvSnapshot(gpu))
    assert sm.field == "gpu.0.sm_count" and sm.stable is False
    # a value that moved is a change of the stack, as ever
    moved = EnvSnapshot({**gpu, "gpu.0.sm_count": Field(114, True)})
    (again,) = envsnap.diff(EnvSnapshot(gpu), moved)
    assert again.stable is True and (again.old, again.new) == (132, 114)
