"""The static model diff: what changed between two ONNX model files, without running either.

``diff_models(old, new)`` compares two models (paths, loaded protobufs or ``LoadedModel``s):
tensors (initializers, ``Constant`` values, tensor attributes, inside ``If``/``Loop``/``Scan``
subgraphs too), list attributes holding weights (ai.onnx.ml ``coefficients``, ``nodes_values``),
nodes added, removed and changed, graph input and output types, opsets, IR version, producer and
external-data files; every changed tensor names the nodes that read it, and a summary counts the
changes by kind. ``manifest(model)`` is the compact record a baseline keeps instead of the model,
and ``diff_against_manifest(manifest, new)`` the same diff against it.

Pure ``onnx`` and numpy: no ONNX Runtime, no inference.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from monitor.modeldiff.consumers import consumers_of
from monitor.modeldiff.diff import compare
from monitor.modeldiff.facts import facts
from monitor.modeldiff.load import LoadedModel, external_locations, load_model
from monitor.modeldiff.manifest import diff_against_manifest, from_manifest
from monitor.modeldiff.manifest import manifest as _manifest
from monitor.modeldiff.result import ModelDiff

ModelLike = Path | str | onnx.ModelProto | LoadedModel

__all__ = [
    "LoadedModel",
    "ModelDiff",
    "diff_against_manifest",
    "diff_models",
    "from_manifest",
    "load_model",
    "manifest",
]


def loaded(model: ModelLike) -> LoadedModel:
    """``model`` as a ``LoadedModel``: a path is read with its external data (``ModelError`` naming it)."""
    if isinstance(model, LoadedModel):
        return model
    if isinstance(model, onnx.ModelProto):
        return LoadedModel(model, "", external_locations(model))
    return load_model(model)


def diff_models(old: ModelLike, new: ModelLike) -> ModelDiff:
    """Everything that differs from ``old`` to ``new``, values compared element by element."""
    before, after = loaded(old), loaded(new)
    return compare(
        facts(before, digests=False),
        facts(after, digests=False),
        old_consumers=consumers_of(before.proto),
        new_consumers=consumers_of(after.proto),
        names=(before.path or "old model", after.path or "new model"),
        exact=True,
    )


def manifest(model: ModelLike) -> dict[str, object]:
    """The compact, JSON-able record of ``model`` that ``diff_against_manifest`` compares against."""
    return _manifest(loaded(model))
