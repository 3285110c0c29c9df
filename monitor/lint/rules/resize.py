"""Resize (and the older Upsample) with sampling modes unlike PyTorch's ``F.interpolate``.

Why: an image upsampled with another coordinate mapping or rounding rule is shifted by up to
a pixel; the error looks like noise near edges and survives every later layer. PyTorch's modes,
as both of its exporters write them (opset 11+):

- ``nearest``: ``asymmetric`` coordinates, ``floor`` rounding (``nearest-exact``: ``half_pixel``
  with ``round_prefer_ceil``);
- ``linear``/``cubic``: ``half_pixel`` or ``pytorch_half_pixel`` (``align_corners=False``, the
  default), ``align_corners`` (``align_corners=True``); cubic with ``cubic_coeff_a=-0.75``.

ONNX's own defaults (``half_pixel`` + ``round_prefer_floor`` for nearest) are *not* PyTorch's, and
a graph edited or converted from another framework often carries ``asymmetric`` linear or
``tf_crop_and_resize``. Opset 10 Resize and opset 7-9 Upsample have no mode attributes: their
linear mode is ``asymmetric``, unlike any PyTorch default.

``align_corners`` is PyTorch's only for ``align_corners=True``, not the default: a linear Resize
with it is held to what the source op said where the dynamo exporter recorded it (node metadata
``pkg.torch.onnx.fx_node``: ``aten.upsample_bilinear2d.vec(x, size, align_corners, scales)``), so a
mode edited or converted away from the source is found both ways; without that metadata it is a
warning (right only if the model used ``align_corners=True``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from monitor.lint.graph import DEFAULT_DOMAINS, LintGraph, Node
from monitor.lint.hazards import Hazard, hazard

PYTORCH_NEAREST = {("asymmetric", "floor"): "nearest", ("half_pixel", "round_prefer_ceil"): "nearest-exact"}
PYTORCH_LINEAR = {"half_pixel", "pytorch_half_pixel", "align_corners"}
PYTORCH_CUBIC_A = -0.75
# aten.upsample_{linear1d,bilinear2d,trilinear3d,bicubic2d}(.vec|.default)(input, size, align_corners, ...)
_FX_UPSAMPLE = re.compile(
    r"aten\.upsample_(?:\w*linear\w*|bicubic\w*)\.\w+\]\(args = \(%\w+, (?:None|\[[^\]]*\]), (True|False)"
)


def check(graph: LintGraph) -> Iterator[Hazard]:
    for node in graph.nodes:
        if node.domain not in DEFAULT_DOMAINS or node.op_type not in ("Resize", "Upsample"):
            continue
        why = _difference(node, graph.opset)
        if why:
            yield hazard("resize_mode", node.name, node.op_type, f"{why}; PyTorch's F.interpolate samples otherwise")


def _difference(node: Node, opset: int) -> str:
    mode = str(node.attribute("mode", "nearest"))
    if node.op_type == "Upsample" or opset < 11:
        if mode in ("linear", "bilinear", "trilinear"):
            return f"mode {mode!r} at opset {opset} maps coordinates 'asymmetric' (no coordinate mode before opset 11)"
        return ""
    coordinates = str(node.attribute("coordinate_transformation_mode", "half_pixel"))
    if mode == "nearest":
        rounding = str(node.attribute("nearest_mode", "round_prefer_floor"))
        if (coordinates, rounding) not in PYTORCH_NEAREST:
            return (
                f"mode 'nearest' with coordinate_transformation_mode {coordinates!r} and nearest_mode {rounding!r}"
                " (PyTorch: 'asymmetric' + 'floor', or 'half_pixel' + 'round_prefer_ceil' for nearest-exact)"
            )
        return ""
    if coordinates not in PYTORCH_LINEAR:
        return (
            f"mode {mode!r} with coordinate_transformation_mode {coordinates!r}"
            f" (PyTorch: one of {sorted(PYTORCH_LINEAR)})"
        )
    source = _source_align_corners(node)
    if source is not None and source != (coordinates == "align_corners"):
        written = "align_corners" if source else "'half_pixel' or 'pytorch_half_pixel'"
        return (
            f"mode {mode!r} with coordinate_transformation_mode {coordinates!r}, but the exporter recorded the"
            f" source op with align_corners={source} (PyTorch writes {written} for it)"
        )
    if source is None and coordinates == "align_corners":
        return (
            f"mode {mode!r} with coordinate_transformation_mode 'align_corners': PyTorch's only for"
            " F.interpolate(align_corners=True), not the default (False, 'half_pixel'); right only if the"
            " model used align_corners=True"
        )
    cubic_a = float(node.attribute("cubic_coeff_a", PYTORCH_CUBIC_A))
    if mode == "cubic" and abs(cubic_a - PYTORCH_CUBIC_A) > 1e-6:
        return f"mode 'cubic' with cubic_coeff_a {cubic_a:g} (PyTorch: {PYTORCH_CUBIC_A:g})"
    return ""


def _source_align_corners(node: Node) -> bool | None:
    """``align_corners`` of the PyTorch op the node came from, from dynamo's metadata; None when unrecorded."""
    for prop in node.proto.metadata_props:
        if prop.key == "pkg.torch.onnx.fx_node":
            found = _FX_UPSAMPLE.search(prop.value)
            if found:
                return found.group(1) == "True"
    return None
