"""The stack key (runtime/stackkey.py): which environment fields form a fleet's comparison groups, and the
snapshot fields it needs (SM count, MIG profile, EP packages) probed through a fake NVML, as test_envsnap does."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from typing import Any

from monitor.runtime import envparts, envsnap, stackkey
from monitor.runtime.envsnap import EnvSnapshot
from tests.test_envsnap import FakeGpu, FakeNvml, FakeNvmlError, snap


@dataclass
class FakeAttributes:
    multiprocessorCount: int


@dataclass
class MigGpu(FakeGpu):
    sm_count: int = 132
    mig: bool = False
    slices: tuple[str, ...] = ()


class MigNvml(FakeNvml):
    """A binding that also answers the SM count and MIG devices (nvidia-ml-py has both)."""

    def nvmlDeviceGetAttributes(self, handle: MigGpu, /) -> FakeAttributes:
        return FakeAttributes(handle.sm_count)

    def nvmlDeviceGetMigMode(self, handle: Any, /) -> list[int]:
        return [1, 1] if isinstance(handle, MigGpu) and handle.mig else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: MigGpu, /) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: MigGpu, index: int, /) -> FakeGpu:
        if index >= len(handle.slices):
            raise FakeNvmlError(6)  # NVML_ERROR_NOT_FOUND: an empty slot
        return FakeGpu(name=f"{handle.name} MIG {handle.slices[index]}")


def stack(snapshot: EnvSnapshot, **given: Any) -> dict[str, str]:
    args: dict[str, Any] = {
        "model_sha256": "ab" * 32,
        "benchset": "b",
        "benchset_version": 1,
        "providers": ("CPUExecutionProvider",),
        "provider_options": {},
        "session_options": {"intra_op_num_threads": 1},
    }
    return stackkey.stack_of(snapshot.to_dict(), **(args | given))


def test_sm_count_and_mig_profile_are_stable_snapshot_fields() -> None:
    whole = snap(MigNvml([MigGpu(sm_count=132)]))
    sliced = snap(MigNvml([MigGpu(sm_count=132, mig=True, slices=("3g.40gb", "1g.10gb"))]))
    assert whole.fields["gpu.0.sm_count"] == envsnap.Field(132, True)
    assert whole.fields["gpu.0.mig_profile"] == envsnap.Field("none", True)
    assert sliced.fields["gpu.0.mig_profile"] == envsnap.Field("1g.10gb,3g.40gb", True)
    assert stack(whole)["gpu.0.mig_profile"] != stack(sliced)["gpu.0.mig_profile"]
    assert "gpu.0.sm_count" not in snap(FakeNvml([FakeGpu()])).fields, "a binding without the call: not asked"


def test_ep_packages_name_each_onnxruntime_distribution_with_its_version() -> None:
    packages = envparts.ep_packages()
    assert f"onnxruntime=={metadata.version('onnxruntime')}" in packages
    assert envparts.onnxruntime_entries()["onnxruntime.ep_packages"] == (packages, True)


def test_the_key_holds_what_changes_numerics_and_nothing_that_differs_between_healthy_nodes() -> None:
    nvml = MigNvml([MigGpu()])
    a = snap(nvml, environ={"ONNXMON_NODE_NAME": "node-a", "NVIDIA_TF32_OVERRIDE": "0"})
    b = snap(
        MigNvml([MigGpu(uuid="GPU-22222222", temperature_c=80, sm_clock_mhz=900)]),
        environ={"ONNXMON_NODE_NAME": "node-b", "NVIDIA_TF32_OVERRIDE": "0"},
    )
    assert a.fingerprint == b.fingerprint
    assert stack(a) == stack(b) and stackkey.key_of(stack(a)) == stackkey.key_of(stack(b))
    fields = stack(a)
    for name in ("onnxruntime.version", "gpu.0.name", "gpu.0.sm_count", "nvml.driver_version", "cpu.arch"):
        assert name in fields, name
    assert fields["env.NVIDIA_TF32_OVERRIDE"] == "0" and fields["model.sha256"] == "ab" * 32
    assert not [n for n in fields if n.startswith(("host.", "k8s.")) or "temperature" in n or "clock" in n]
    assert not [n for n in fields if n.endswith((".uuid", ".path"))]


def test_a_changed_stack_field_changes_the_key_and_is_named_first_when_a_version() -> None:
    base = snap(MigNvml([MigGpu()]))
    data = base.to_dict()
    data["fields"]["onnxruntime.version"] = {"value": "1.20.1", "stable": True}
    data["fields"]["onnxruntime.build_info"] = {"value": "another build", "stable": True}
    other = EnvSnapshot.from_dict(data)
    assert stackkey.key_of(stack(base)) != stackkey.key_of(stack(other))
    assert stackkey.key_of(stack(base)) != stackkey.key_of(stack(base, session_options={"intra_op_num_threads": 4}))
    assert stackkey.separating([stack(base), stack(other)])[0] == "onnxruntime.version"
    assert stackkey.separating([stack(base), stack(base)]) == []
