"""The environment snapshot warns when ORT / CUDA / cuDNN / TensorRT fall outside the ranges ORT's release supports.

Synthetic snapshots: the versions a GPU pod would record, read back through ``EnvSnapshot.from_dict``.
"""

from __future__ import annotations

from typing import Any

import pytest

from monitor.runtime import compat, envsnap


def snapshot(**versions: str) -> envsnap.EnvSnapshot:
    names = {"ort": "onnxruntime.version", "cuda": "cuda.runtime.version", "cudnn": "cuda.cudnn.version"}
    names["trt"] = "cuda.tensorrt.version"
    fields: dict[str, Any] = {names[k]: {"value": v, "stable": True} for k, v in versions.items()}
    return envsnap.EnvSnapshot.from_dict({"schema_version": envsnap.SCHEMA_VERSION, "fields": fields, "captured_at": 0})


def warned(snap: envsnap.EnvSnapshot) -> list[str]:
    return compat.warnings({name: field.value for name, field in snap.fields.items()})


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        ({"ort": "1.22.0", "cuda": "12.8", "cudnn": "9.8.0"}, []),
        ({"ort": "1.22.0", "cuda": "12.4", "cudnn": "9.1.0", "trt": "10.9.0"}, []),
        ({"ort": "1.20.1", "cuda": "11.8", "cudnn": "8.9.7"}, []),  # the CUDA 11 package
        ({"ort": "1.22.0", "cuda": "11.8", "cudnn": "8.9.7"}, ["CUDA runtime 11.8 loaded"]),
        ({"ort": "1.20.1", "cuda": "12.6", "cudnn": "8.9.7"}, ["cuDNN 8.9 loaded with CUDA 12"]),
        ({"ort": "1.22.0", "cuda": "12.8", "cudnn": "9.8.0", "trt": "8.6.1"}, ["is built for TensorRT 10.9"]),
        ({"ort": "1.22.0", "cuda": "12.8", "cudnn": "9.8.0", "trt": "10.4.0"}, ["is tested with TensorRT 10.9"]),
        ({"ort": "1.20.1", "cuda": "12.8", "cudnn": "9.1.0", "trt": "10.4.0"}, ["lists CUDA 12.0-12.6"]),
        ({"ort": "1.26.0", "cuda": "12.9", "cudnn": "9.10.0"}, []),
        (
            {"ort": "1.31.1", "cuda": "12.9", "cudnn": "9.10.0"},
            ["CUDA runtime 12.9 loaded; onnxruntime 1.31.1 is built for CUDA 13.x"],
        ),
        ({"ort": "1.14.1", "cuda": "13.0", "cudnn": "7.0.0"}, []),  # a release the table does not list: not judged
        ({"ort": "1.22.0"}, []),  # a CPU process: no CUDA library loaded, nothing to judge
    ],
)
def test_a_combination_outside_the_release_is_warned_about(versions: dict[str, str], expected: list[str]) -> None:
    found = warned(snapshot(**versions))
    assert len(found) == len(expected), found
    for line, fragment in zip(found, expected, strict=True):
        assert fragment in line and "onnxruntime.ai/docs/execution-providers/" in line, line


def test_the_warning_is_a_volatile_snapshot_field() -> None:
    entries = {"onnxruntime.version": ("1.22.0", True), "cuda.runtime.version": ("11.8", True)}
    (field,) = compat.compat_entries(entries).items()
    assert field[0] == "compat.warnings" and field[1][1] is False, "a newer table must not flip fingerprints"


def test_this_cpu_process_has_no_warning() -> None:
    assert envsnap.capture(nvml=None).get("compat.warnings") is None
