"""Test-only: ``onnxmon`` whose ONNX Runtime answers differently when ``run()`` overlaps another call.

Run as a main script (``python tests/overlap_plugin.py check MODEL ...``): it wraps
``onnxruntime.InferenceSession.run`` in this process only, then hands its arguments to onnxmon's
command line. The check worker (a forkserver child) inherits the wrapper: the forkserver imports this
main script once (``monitor/daemon/forkmain.py``) and every child re-imports it otherwise. Production
code carries nothing of it.

The wrapper: a call during which another call was in flight (at its start, or started before it
ended) gets its first floating-point output nudged by one ULP at element 0, the smallest change a
bitwise comparison can see and far inside any tolerance. A call alone is untouched, so a serial replay
is exactly plain ONNX Runtime's.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

_lock = threading.Lock()
_state = {"in_flight": 0, "started": 0, "nudged": 0}
_original = ort.InferenceSession.run


def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
    with _lock:
        _state["in_flight"] += 1
        started = _state["started"] = _state["started"] + 1
        crowded = _state["in_flight"] > 1
    try:
        outputs = _original(self, *args, **kwargs)
    finally:
        with _lock:
            crowded = crowded or _state["started"] != started
            _state["in_flight"] -= 1
    if crowded:
        for index, value in enumerate(outputs):
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                nudged = value.copy()
                flat = nudged.reshape(-1)
                flat[0] = np.nextafter(flat[0], np.inf, dtype=value.dtype)
                outputs[index] = nudged
                with _lock:
                    _state["nudged"] += 1
                break
    return outputs


ort.InferenceSession.run = _run


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from monitor import cli

    sys.exit(cli.main(sys.argv[1:]))
