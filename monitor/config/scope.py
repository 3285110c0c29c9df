"""Where a process finds its baselines: shared by every node, per GPU pool, or per node.

``daemon.baseline_scope`` makes the rule explicit:

- ``shared``: ``<baselines_dir>/<model>/`` — one baseline for the whole fleet (the default);
- ``pool``: ``<baselines_dir>/pools/<pool>/<model>/`` — one per kind of accelerator, so an A100
  pool and an L4 pool each keep the numbers their hardware produces. The pool is
  ``daemon.pool`` when set (the Helm chart can set it per node pool), else the GPU model
  reported by NVML, else ``cpu``;
- ``node``: ``<baselines_dir>/nodes/<node>/<model>/`` — one per node (``ONNXMON_NODE_NAME``
  from the downward API, else the host name), for fleets whose nodes differ in firmware or
  clocks and must each be held to their own numbers.

Every command and the daemon apply the scope once, right after loading the config, so the
rest of onnxmon only ever sees ``store.baselines_dir``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from monitor.config.identity import identity
from monitor.config.settings import Settings


def apply(
    settings: Settings,
    *,
    gpu_name: Callable[[], str | None],
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """``settings`` with ``store.baselines_dir`` pointing at this process's scope.

    ``gpu_name`` names this machine's accelerator (``runtime.envsnap.first_gpu_name`` in the daemon
    and the CLI); it is asked only for the pool scope without ``daemon.pool``. Passing it in keeps
    the config layer free of the runtime probes.
    """
    directory = baselines_dir(settings, gpu_name=gpu_name, environ=environ)
    if directory == settings.store.baselines_dir:
        return settings
    store = settings.store.model_copy(update={"baselines_dir": directory})
    return settings.model_copy(update={"store": store})


def baselines_dir(
    settings: Settings,
    *,
    gpu_name: Callable[[], str | None],
    environ: Mapping[str, str] | None = None,
) -> Path:
    env = os.environ if environ is None else environ
    root = settings.store.baselines_dir
    scope = settings.daemon.baseline_scope
    if scope == "pool":
        pool = settings.daemon.pool or gpu_name() or "cpu"
        return root / "pools" / slug(pool)
    if scope == "node":
        node = identity(env).node_or_host()
        return root / "nodes" / slug(node)
    return root


def slug(text: str) -> str:
    """A directory name from a GPU model or node name: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", text.strip().lower()).strip("-.")
    return cleaned or "unnamed"
