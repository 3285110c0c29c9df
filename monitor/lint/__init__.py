"""Export lint: hazards a PyTorch (or any) export leaves in an ONNX graph, each naming its node.

Static and pure ``onnx`` + numpy (its own import-linter contract keeps ``onnxruntime`` and
``monitor.runtime`` out): ``lint_model(path)`` reads the file and returns a ``LintReport``.
What the runtime supports is probed by the caller and passed in. Used by ``onnxmon lint`` and,
cached by model digest, by every check (``details["lint"]``).
"""

from __future__ import annotations

from monitor.lint.hazards import HAZARD_CODES, Hazard, LintReport
from monitor.lint.lint import lint_model, lint_proto, load
from monitor.lint.rules.batch import VariedDims
from monitor.lint.rules.versions import RuntimeSupport

__all__ = ["HAZARD_CODES", "Hazard", "LintReport", "RuntimeSupport", "VariedDims", "lint_model", "lint_proto", "load"]
