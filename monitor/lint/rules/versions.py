"""An IR version or operator set newer than the installed ONNX Runtime loads.

Why: a model exported by a newer torch/onnx (``opset_version=23``) fails to load in an older
runtime, often only on the serving stack. What the runtime supports is probed by the caller
(``monitor.runtime.support.probe``, which loads tiny models into real sessions) and handed in as
a ``RuntimeSupport``: lint itself stays static, pure ``onnx`` and numpy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.lint.graph import LintGraph
from monitor.lint.hazards import Hazard, hazard


@dataclass(frozen=True)
class RuntimeSupport:
    """The newest IR version and opset (per domain) a runtime loads; ``version`` is its own."""

    runtime: str
    version: str
    max_ir_version: int
    max_opsets: Mapping[str, int] = field(default_factory=dict)  # "" is ai.onnx

    def to_dict(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "version": self.version,
            "max_ir_version": self.max_ir_version,
            "max_opsets": dict(self.max_opsets),
        }


def check(graph: LintGraph, support: RuntimeSupport) -> Iterator[Hazard]:
    model = graph.model
    runtime = f"{support.runtime} {support.version}"
    if model.ir_version > support.max_ir_version:
        yield hazard(
            "ir_version_unsupported",
            "model",
            "ModelProto",
            f"IR version {model.ir_version} is newer than {runtime} loads (at most {support.max_ir_version});"
            " export with an older onnx or upgrade the runtime",
        )
    for opset in model.opset_import:
        domain = "" if opset.domain == "ai.onnx" else opset.domain
        newest = support.max_opsets.get(domain)
        if newest is not None and opset.version > newest:
            shown = opset.domain or "ai.onnx"
            yield hazard(
                "opset_unsupported",
                "model",
                "ModelProto",
                f"opset {shown} {opset.version} is newer than {runtime} supports (at most {newest});"
                f" export with opset_version={newest} or upgrade the runtime",
            )
