"""The one interface a check replays a benchmark set through: a ``Runner``.

Two runners answer it, as Polygraphy's backends do: ``runtime.session.Session`` (an ONNX Runtime
session built here exactly as production configures it) and ``serving.client.EndpointRunner`` (the
model where it is served, over the Open Inference Protocol). ``check/replay.py`` knows only this
protocol, so everything after the replay (comparison, digests, history, metrics, alerts) is the same
for a local model and a served one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from monitor.runtime.watchdog import Deadline


class Runner(Protocol):
    """What a replay asks of whatever computes a model's outputs."""

    @property
    def output_names(self) -> list[str]:
        """The compared outputs, in the order the runner gives them."""
        ...

    def run_repeats(
        self, feeds: Mapping[str, np.ndarray], times: int, *, guard: Deadline, where: str = "inputs"
    ) -> list[dict[str, np.ndarray]]:
        """``times`` runs of ``feeds`` under the replay's deadline ``guard``, each a name -> array map."""
        ...
