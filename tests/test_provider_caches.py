"""TensorRT's engine and timing caches go to the data volume by default, unless a provider says otherwise.

Without a cache TensorRT builds its engine at every session start (minutes for a large model): every
check of a fresh worker and the first of every warm one.
"""

from __future__ import annotations

from pathlib import Path

from monitor.config.plan import plan_for
from tests import modelzoo
from tests.workspace import Workspace

TRT = {"name": "TensorrtExecutionProvider", "options": {"device_id": 0}}


def options(ws: Workspace, name: str) -> dict[str, object]:
    (provider,) = [p for p in plan_for(ws.settings(), name).model.providers if p.name == TRT["name"]]
    return dict(provider.options)


def test_a_tensorrt_provider_caches_its_engine_beside_the_benchsets_by_default(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier(), providers=[TRT, "CUDAExecutionProvider", "CPUExecutionProvider"])
    got = options(ws, "m")
    cache = str(tmp_path / "provider-cache" / "tensorrt")
    assert got == {
        "device_id": 0,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": cache,
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": cache,
    }
    plan = plan_for(ws.settings(), "m")
    assert [dict(p.options) for p in plan.model.providers[1:]] == [{}, {}], "only TensorRT gets cache options"


def test_the_cache_dir_is_configurable_and_a_providers_own_options_win(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    own = {"name": TRT["name"], "options": {"trt_engine_cache_path": "/elsewhere", "trt_timing_cache_enable": False}}
    ws.add_model("m", modelzoo.classifier(), providers=[own])
    ws.extra["daemon"] = {"provider_cache_dir": "caches"}
    got = options(ws, "m")
    assert got["trt_engine_cache_path"] == "/elsewhere" and got["trt_timing_cache_enable"] is False
    assert got["trt_timing_cache_path"] == str(tmp_path / "caches" / "tensorrt"), "relative to the config file"


def test_a_cpu_model_is_left_alone(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.add_model("m", modelzoo.classifier())
    assert all(not p.options for p in plan_for(ws.settings(), "m").model.providers)
