"""``checks.concurrency: 4`` on real corpus models: plain ONNX Runtime is thread-safe, so they pass.

Ground truth: plain ONNX Runtime, one ``InferenceSession`` per model, the benchmark set's samples run
serially and then from 4 threads at once (every sample on every thread), each concurrent answer
compared with the serial one by its bytes (numpy), never with onnxmon's code. The check must fail
with ``concurrency_variant`` exactly where that ground truth differs, and say how many of its calls
really overlapped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from monitor.check import run_check
from tests.realmodels import MODELS, Prepared, fit_inputs, prepare

pytestmark = [pytest.mark.realmodels]

# small ones of several kinds: a ZipMap of labels, a stateful RNN with control flow, CNNs
CHOSEN = ("sk-logreg-zipmap", "silero-vad", "vietcombank-captcha", "torch-cnn-legacy")
THREADS = 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Prepared]]:
    cache: dict[str, Prepared] = {}
    for name in CHOSEN:
        assert name in MODELS, name
        item = prepare(cache, name, tmp_path_factory)
        item.ws.models[name]["checks"] = {"lint": False, "concurrency": THREADS}
        item.captured()
    yield cache


def _bytes(value: Any) -> bytes:
    """An answer's bit patterns: an array's dtype, shape and bytes; anything else (a ZipMap's dicts) as text."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype.str}{value.shape}".encode() + np.ascontiguousarray(value).tobytes()
    return repr(value).encode()


def plain_thread_safe(item: Prepared) -> bool:
    """Plain ONNX Runtime: does every answer from 4 threads at once equal the serial answer, byte for byte?"""
    session = ort.InferenceSession(str(item.path), providers=["CPUExecutionProvider"])
    feeds = [fit_inputs(session, sample) for sample in item.samples()]
    serial = [[_bytes(v) for v in session.run(None, f)] for f in feeds]
    start = threading.Barrier(THREADS)
    differs: list[int] = []

    def work() -> None:
        start.wait()
        for _ in range(3):
            for index, fed in enumerate(feeds):
                if [_bytes(v) for v in session.run(None, fed)] != serial[index]:
                    differs.append(index)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return not differs


@pytest.mark.parametrize("name", CHOSEN)
def test_real_models_pass_under_concurrency_exactly_where_plain_onnx_runtime_is_thread_safe(
    corpus: dict[str, Prepared], name: str
) -> None:
    item = corpus[name]
    result = run_check(item.plan())
    found = result.details["concurrency"]
    codes = {r.code for r in result.reasons}
    safe = plain_thread_safe(item)
    assert ("concurrency_variant" not in codes) == safe, [str(r) for r in result.reasons]
    samples = len(item.samples())
    assert found["threads"] == THREADS and found["calls"] >= samples * found["passes"]
    # calls really overlapped: threads done early call again until every thread has made its first call
    assert found["overlapped_calls"] > 0 and 2 <= found["max_in_flight"] <= THREADS
    assert found["failures"] == [] and "note" not in found
    if safe:
        assert result.verdict.value == "pass", [str(r) for r in result.reasons]
        assert found["differing"] == {}
