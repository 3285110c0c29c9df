"""The monitor's GPU footprint: a capped CUDA arena, its growth strategy, and the arena given back after runs.

Tested through what the settings build: the plan's provider options, the options ONNX Runtime is
handed (``provider_arguments``), and the ``RunOptions`` a real session's runs carry. No GPU needed:
on this machine a CUDA provider falls back to CPU, which is the case the shrinkage must survive.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.config.plan import ARENA_SHRINKAGE, plan_for
from monitor.config.settings import ProviderSpec, SessionConfig
from monitor.errors import ConfigError
from monitor.runtime.session import Deadline, Session, provider_arguments
from tests import modelzoo
from tests.workspace import Workspace

CUDA = "CUDAExecutionProvider"
GIB = 2**30


def workspace(tmp_path: Path, providers: list[object], **daemon: object) -> Workspace:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), providers=providers)
    ws.extra["daemon"] = dict(daemon)
    return ws


def test_the_daemons_gpu_memory_limit_caps_each_cuda_providers_arena(tmp_path: Path) -> None:
    ws = workspace(
        tmp_path, [CUDA, "CPUExecutionProvider"], gpu_memory_limit=2 * GIB, gpu_arena_extend_strategy="kSameAsRequested"
    )
    model = plan_for(ws.settings(), "m").model
    names, options = provider_arguments(model.providers)
    assert names == [CUDA, "CPUExecutionProvider"]
    assert options == [{"gpu_mem_limit": str(2 * GIB), "arena_extend_strategy": "kSameAsRequested"}, {}]
    assert model.session.run_config_entries == {}, "no shrinkage unless asked"


def test_a_providers_own_arena_options_win_and_tensorrt_is_left_alone(tmp_path: Path) -> None:
    own = {"name": CUDA, "options": {"device_id": 1, "gpu_mem_limit": GIB}}
    trt = {"name": "TensorrtExecutionProvider", "options": {"device_id": 1}}
    ws = workspace(tmp_path, [trt, own], gpu_memory_limit=4 * GIB, gpu_arena_shrinkage=True)
    model = plan_for(ws.settings(), "m").model
    _, options = provider_arguments(model.providers)
    assert options[1] == {"device_id": "1", "gpu_mem_limit": str(GIB)}
    assert "gpu_mem_limit" not in options[0]
    assert model.session.run_config_entries == {ARENA_SHRINKAGE: "gpu:1"}, "the CUDA provider's device"


def test_a_cpu_model_gets_no_gpu_options(tmp_path: Path) -> None:
    ws = workspace(tmp_path, ["CPUExecutionProvider"], gpu_memory_limit=2 * GIB, gpu_arena_shrinkage=True)
    model = plan_for(ws.settings(), "m").model
    assert [dict(p.options) for p in model.providers] == [{}]
    assert model.session.run_config_entries == {}


def test_a_limit_below_16_mib_is_refused_at_load(tmp_path: Path) -> None:
    ws = workspace(tmp_path, [CUDA], gpu_memory_limit=1024)
    with pytest.raises(ConfigError, match="gpu_memory_limit"):
        ws.settings()


def _run(session: Session) -> Deadline:
    feeds = {"x": np.ones((2, 16), np.float32)}
    with Deadline(None) as guard:
        session.run(feeds, guard=guard)
        session.run(feeds, guard=guard)  # a second run sets nothing again
    return guard


def test_the_shrinkage_run_option_reaches_every_run(tmp_path: Path) -> None:
    path = modelzoo.save(modelzoo.classifier(), tmp_path / "m.onnx")
    session = Session(
        path, [ProviderSpec(name="CPUExecutionProvider")], SessionConfig(run_config_entries={ARENA_SHRINKAGE: "cpu:0"})
    )
    guard = _run(session)
    assert guard.run_options.get_run_config_entry(ARENA_SHRINKAGE) == "cpu:0"


def test_a_cuda_provider_that_fell_back_drops_its_gpu_from_the_shrink_list(tmp_path: Path) -> None:
    """ORT refuses a run naming a device without an arena; a fallback must cost the arena release, not the check."""
    ws = workspace(tmp_path, [CUDA, "CPUExecutionProvider"], gpu_arena_shrinkage=True)
    model = plan_for(ws.settings(), "m").model
    assert model.session.run_config_entries == {ARENA_SHRINKAGE: "gpu:0"}
    session = Session(model.path, model.providers, model.session)
    if CUDA in session.info.effective:
        pytest.skip("CUDA really runs here: the GPU acceptance (scripts/gpu-acceptance) measures the release")
    assert session.run_config == {}
    guard = _run(session)
    with pytest.raises(RuntimeError, match="does not have configuration"):
        guard.run_options.get_run_config_entry(ARENA_SHRINKAGE)
