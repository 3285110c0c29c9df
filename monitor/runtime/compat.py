"""Is this ONNX Runtime running with the CUDA, cuDNN and TensorRT its release was built for?

ONNX Runtime's GPU packages are built against one CUDA major, one cuDNN major and one TensorRT
version. Within a CUDA major any minor works (NVIDIA's minor version compatibility); cuDNN 8 and 9
are not interchangeable; the TensorRT provider is built and tested against one TensorRT release, and
its CUDA range. A mismatch often still loads (or falls back to the CPU with one log line) and then
computes with other kernels, so the snapshot says so: ``compat.warnings``, a volatile field (the
table is onnxmon's knowledge, not the machine's: a newer table must not flip fingerprints).

The table is small and dated; a release it does not list is not judged. Sources, read 2026-12:

* ONNX Runtime, CUDA Execution Provider, "Requirements":
  https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#requirements
* ONNX Runtime, TensorRT Execution Provider, "Requirements" (its ONNX Runtime / TensorRT / CUDA table):
  https://onnxruntime.ai/docs/execution-providers/TensorRT-ExecutionProvider.html#requirements
* 1.23 onwards, PyPI's onnxruntime-gpu builds (CUDA 12 + cuDNN 9 up to 1.26, CUDA 13 + cuDNN 9 from
  1.27), as ``docs/kubernetes.md`` records them for the image.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from monitor.runtime.gpu import Entries, JsonValue

CUDA_EP_SOURCE = "https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#requirements"
TENSORRT_EP_SOURCE = "https://onnxruntime.ai/docs/execution-providers/TensorRT-ExecutionProvider.html#requirements"


@dataclass(frozen=True)
class Release:
    """The builds of a range of ONNX Runtime minor releases."""

    first: tuple[int, int]
    last: tuple[int, int]
    builds: tuple[tuple[int, int], ...]  # (CUDA major, cuDNN major) of each GPU package
    tensorrt: tuple[int, int] | None = None  # the TensorRT release its provider is built with
    tensorrt_cuda_minor_max: int | None = None  # the last CUDA 12 minor that TensorRT row lists

    def covers(self, version: tuple[int, int]) -> bool:
        return self.first <= version <= self.last


RELEASES: tuple[Release, ...] = (
    Release((1, 15), (1, 16), ((11, 8),), (8, 6)),
    Release((1, 17), (1, 17), ((11, 8), (12, 8)), (8, 6)),
    Release((1, 18), (1, 18), ((11, 8), (12, 8), (12, 9)), (10, 0), 6),  # 1.18.1 moved CUDA 12 to cuDNN 9
    Release((1, 19), (1, 19), ((11, 8), (12, 9)), (10, 2), 6),
    Release((1, 20), (1, 20), ((11, 8), (12, 9)), (10, 4), 6),
    Release((1, 21), (1, 21), ((11, 8), (12, 9)), (10, 8), 8),
    Release((1, 22), (1, 22), ((12, 9),), (10, 9), 8),  # from 1.22 only CUDA 12 packages
    Release((1, 23), (1, 26), ((12, 9),)),
    Release((1, 27), (1, 99), ((13, 9),)),
)


def _major_minor(value: JsonValue) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", str(value or ""))
    return (int(match[1]), int(match[2])) if match else None


def release_of(ort_version: JsonValue) -> Release | None:
    version = _major_minor(ort_version)
    return next((r for r in RELEASES if version and r.covers(version)), None)


def warnings(fields: Mapping[str, JsonValue]) -> list[str]:
    """What in ``fields`` (a snapshot's values) is outside the ranges its ONNX Runtime release supports."""
    ort = fields.get("onnxruntime.version")
    release = release_of(ort)
    if release is None:
        return []
    found: list[str] = []
    cuda = _major_minor(fields.get("cuda.runtime.version"))
    cudnn = _major_minor(fields.get("cuda.cudnn.version"))
    tensorrt = _major_minor(fields.get("cuda.tensorrt.version"))
    builds = ", ".join(f"CUDA {c}.x + cuDNN {d}" for c, d in release.builds)
    if cuda and cuda[0] not in {c for c, _ in release.builds}:
        found.append(
            f"CUDA runtime {cuda[0]}.{cuda[1]} loaded; onnxruntime {ort} is built for {builds} ({CUDA_EP_SOURCE})"
        )
    elif cuda and cudnn and (cuda[0], cudnn[0]) not in release.builds:
        found.append(
            f"cuDNN {cudnn[0]}.{cudnn[1]} loaded with CUDA {cuda[0]}; onnxruntime {ort} is built for {builds}"
            f" ({CUDA_EP_SOURCE})"
        )
    if tensorrt and release.tensorrt:
        wanted = "{}.{}".format(*release.tensorrt)
        if tensorrt != release.tensorrt:
            kind = "built for" if tensorrt[0] != release.tensorrt[0] else "tested with"
            found.append(
                f"TensorRT {tensorrt[0]}.{tensorrt[1]} loaded; onnxruntime {ort}'s TensorRT provider is {kind}"
                f" TensorRT {wanted} ({TENSORRT_EP_SOURCE})"
            )
        top = release.tensorrt_cuda_minor_max
        if cuda and top is not None and cuda[0] == 12 and cuda[1] > top:
            found.append(
                f"CUDA {cuda[0]}.{cuda[1]} with TensorRT: onnxruntime {ort}'s TensorRT provider lists"
                f" CUDA 12.0-12.{top} ({TENSORRT_EP_SOURCE})"
            )
    return found


def compat_entries(entries: Entries) -> Entries:
    """``compat.warnings`` (volatile) for a snapshot's entries, when there is anything to warn about."""
    found = warnings({name: value for name, (value, _) in entries.items()})
    return {"compat.warnings": (found, False)} if found else {}
