"""The input check and the module -> tensor map, without torch: pure numpy and the committed exports.

``inputs.describe`` explains what PyTorch consumed against the benchmark set's array as the simplest
transform that reproduces it; each case below builds PyTorch's side with plain numpy from the
benchmark array (the ground truth) and reads the description. ``naming`` reads the module scopes
of the two exporters from ``tests/corpus/torch/`` (made by ``tests/corpus/make_torch.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from monitor.torchref import inputs, naming

CORPUS = Path(__file__).resolve().parent / "corpus" / "torch"
RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (2, 3, 8, 8)).astype(np.float32)
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
RAW = X * STD + MEAN
Transform = Callable[[np.ndarray], np.ndarray]

CASES: list[tuple[str, Transform, tuple[str, ...], str]] = [
    ("bgr", lambda x: x[:, ::-1], ("channel_permutation",), "channels [2, 1, 0] (axis 1) (BGR vs RGB)"),
    ("gbr", lambda x: x[:, [1, 2, 0]], ("channel_permutation",), "channels [1, 2, 0] (axis 1)"),
    ("wrong mean", lambda x: ((x * STD + MEAN) - 0.5) / STD, ("affine",), "a different mean, the same std"),
    ("wrong mean and std", lambda x: ((x * STD + MEAN) - 0.5) / 0.5, ("affine",), "a different mean/std"),
    ("/255 without the mean", lambda x: x / 255, ("affine",), "/255 (0-1 against 0-255), and no mean/std"),
    ("x255", lambda x: x * 255, ("affine",), "x255"),
    ("nhwc", lambda x: x.transpose(0, 2, 3, 1), ("layout",), "NHWC [2, 8, 8, 3], the benchmark set feeds NCHW"),
    ("float64", lambda x: x.astype(np.float64), ("dtype",), "consumed float64, the benchmark set feeds float32"),
    ("bgr and nhwc", lambda x: x[:, ::-1].transpose(0, 2, 3, 1), ("layout", "channel_permutation"), "BGR vs RGB"),
    ("bgr and wrong mean", lambda x: (((x * STD + MEAN) - 0.5) / STD)[:, ::-1], ("channel_permutation", "affine"),
     "a different mean"),
    ("noise", lambda x: x + np.float32(0.1) * np.sign(x), ("values",), "no layout, channel order or scale/shift"),
    ("cropped", lambda x: x[:, :, :4], ("shape",), "PyTorch consumed [2, 3, 4, 8], the benchmark set feeds"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "transform", "kinds", "described"), CASES, ids=[c[0] for c in CASES])
def test_an_input_difference_is_described_as_the_transform_that_makes_it(
    case: str, transform: Transform, kinds: tuple[str, ...], described: str
) -> None:
    consumed = np.ascontiguousarray(transform(X))
    if consumed.dtype == np.float64 and case != "float64":
        consumed = consumed.astype(np.float32)
    difference = inputs.describe("image", 3, X, consumed)
    assert difference is not None
    assert difference.kinds == kinds
    assert described in difference.description
    assert difference.description.startswith("input 'image' (sample 3): ")


def test_the_same_input_is_no_difference_even_bit_for_bit_rounded() -> None:
    assert inputs.describe("image", 0, X, X.copy()) is None
    assert inputs.describe("image", 0, X, np.nextafter(X, np.float32(np.inf))) is None


def test_a_uniform_scale_and_shift_of_features_is_one_number_each() -> None:
    features = RNG.standard_normal((2, 12, 32)).astype(np.float32)
    difference = inputs.describe("embeddings", 0, features, features * 2 + 1)
    assert difference is not None and "PyTorch = benchset * 2 + 1 along axis 2" in difference.description


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (np.array(3.0, np.float32), np.array(4.0, np.float32)),  # 0-d
        (np.zeros((0, 3, 2, 2), np.float32), np.zeros((0, 3, 2, 2), np.float32) + 1),  # empty
        (np.full((1, 3, 2, 2), np.nan, np.float32), np.zeros((1, 3, 2, 2), np.float32)),  # NaN
        (np.full((1, 3, 2, 2), 3e38, np.float32), np.full((1, 3, 2, 2), -3e38, np.float32)),  # huge
        (np.array(["a", "b"]), np.array(["a", "c"])),  # strings
        (np.arange(6, dtype=np.int64).reshape(1, 6), np.arange(6, dtype=np.int32).reshape(1, 6)),  # int dtype
    ],
)
def test_hostile_inputs_are_described_never_crash(ours: np.ndarray, theirs: np.ndarray) -> None:
    difference = inputs.describe("x", 0, ours, theirs)
    if ours.size == 0:
        assert difference is None  # nothing to differ
        return
    assert difference is not None and difference.description


@pytest.mark.parametrize(
    ("node", "module"),
    [
        ("/stem/stem.0/Conv", "stem.0"),
        ("/block2/skip/skip.0/Conv", "block2.skip.0"),
        ("/layer1/layer1.0/conv1/Conv", "layer1.0.conv1"),
        ("/layer/self_attn/Gemm", "layer.self_attn"),
        ("/Flatten", ""),
        ("Conv_3", None),
        ("//Conv", None),
    ],
)
def test_legacy_node_names_read_as_module_paths(node: str, module: str | None) -> None:
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"], name=node)], "g", [], [])
    scopes, _ = naming.node_scopes(onnx.helper.make_model(graph))
    assert scopes == [module]


@pytest.mark.parametrize(
    ("text", "module"),
    [
        ("['', 'block2', 'block2.skip', 'block2.skip.1', '_native_batch_norm_legit_no_training_5']", "block2.skip.1"),
        ("['', 'view']", ""),
        ("['_empty_nn_module_stack_from_metadata_hook', 'sym_size_int_2']", None),
        ("not a list", None),
        ("__import__('os').system('false')", None),  # read as a literal, never evaluated
    ],
)
def test_dynamo_name_scopes_read_as_module_paths(text: str, module: str | None) -> None:
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="node_relu")
    node.metadata_props.add(key=naming.NAME_SCOPES, value=text)
    scopes, _ = naming.node_scopes(onnx.helper.make_model(onnx.helper.make_graph([node], "g", [], [])))
    assert scopes == [module]


@pytest.mark.parametrize(("name", "exporter"), [("cnn_legacy.onnx", "legacy"), ("cnn_dynamo.onnx", "dynamo")])
def test_the_folded_batchnorm_takes_over_its_convs_tensor_in_both_exports(name: str, exporter: str) -> None:
    model = onnx.load(str(CORPUS / name))
    calls = [  # the stem's calls as the forward hooks see them: conv, then the BatchNorm fed by it
        naming.ModuleCall("stem.0", "torch.nn.modules.conv.Conv2d", None),
        naming.ModuleCall("stem.1", "torch.nn.modules.batchnorm.BatchNorm2d", "stem.0"),
        naming.ModuleCall("stem.2", "torch.nn.modules.activation.ReLU", "stem.1"),
        naming.ModuleCall("stem", "torch.nn.modules.container.Sequential", None),
    ]
    first_conv = next(n for n in model.graph.node if n.op_type == "Conv")
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    everything = frozenset(out for n in model.graph.node for out in n.output)
    mapped = naming.map_modules(model, calls, everything)
    assert mapped.exporter == exporter
    assert mapped.tensors["stem.1"] == first_conv.output[0]
    assert "stem.0" not in mapped.tensors
    assert mapped.tensors["stem.2"] == mapped.tensors["stem"] == relu.output[0]
    assert mapped.folded == ({"stem.1": "stem.0"} if exporter == "legacy" else {})
