"""Is the endpoint answering from a response cache? A nonce-varied twin request says.

A response cache (Triton's ``response_cache``, a caching proxy in front of the server) answers a request
it has seen before without running the model. A benchmark set is the same requests at every check, so
after the first check a cache answers all of them: the check would then measure the cache, and a server
upgraded (or a model swapped) behind a warm cache would pass for as long as the cache lives.

The probe sends what no cache can hold: a **twin** of sample 0 whose float inputs carry noise drawn from
a fresh random nonce (so no earlier request had these bytes), at the smallest scale (1e-3, 1e-2, 1e-1 of
the input's spread) at which the **local session** (the same model file, the control) gives other
outputs than for the sample itself. Then:

- the server answers the twin with its answer to sample 0, bit for bit: the answer did not come from
  running the model on these inputs (a cache keyed on anything short of the whole input, a stale answer
  replayed): **cached**;
- the server's answers to the set match the baseline, but its answer to the twin is outside the output's
  tolerance of the model's answer to the same twin: the set's answers are not what the served model
  computes now, they are stored ones: **cached**;
- otherwise the server computed the twin as the model does: not cached.

It cannot decide (and says so in the details, never a pass in disguise) when the model has no float
input to vary, or no variation changes its answer (a classifier's argmax, a quantized model's steps).
Honest about its limit: a cache in front of a server whose model still computes what the baseline holds
is not reported, because its answers are then the model's numbers too.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.files import benchsets
from monitor.results import AppliedTolerance, Reason
from monitor.runtime.session import Session
from monitor.serving.client import EndpointRunner

SCALES = (1e-3, 1e-2, 1e-1)


@dataclass(frozen=True)
class Probe:
    """The probe's finding: ``cached``, ``not_cached`` or ``inconclusive``, and why."""

    result: str
    detail: str
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> Reason | None:
        return Reason("endpoint_cached", self.detail) if self.result == "cached" else None

    def to_dict(self) -> dict[str, Any]:
        return {"result": self.result, "detail": self.detail, **self.facts}


def probe(
    session: Session,
    runner: EndpointRunner,
    bench: benchsets.Benchset,
    tolerances: Mapping[str, AppliedTolerance],
    *,
    set_matches_baseline: bool,
    left: Callable[[], float] | None = None,
) -> Probe:
    """Send a nonce-varied twin of sample 0 to ``runner``; see the module docstring for the rule.

    ``left()``: the seconds left before the check's timeout; a request that might not end before it (less
    than ``endpoint.timeout_s`` left) is not sent: the check, past its timeout, would lose all it measured."""
    if len(bench) == 0:
        return Probe("inconclusive", "the benchmark set has no sample to vary")
    feeds = dict(session.fit_float_inputs(bench.load_sample(0)))
    varied = [name for name, value in feeds.items() if value.dtype.kind == "f" and value.size]
    if not varied:
        return Probe("inconclusive", "the model has no float input to vary (integer or text inputs only)")
    names = runner.output_names
    nonce = secrets.token_hex(8)
    rng = np.random.default_rng(int(nonce, 16))
    local = session.run(feeds, where="cache probe, sample 0")
    twin: dict[str, np.ndarray] | None = None
    for scale in SCALES:
        candidate = dict(feeds)
        for name in varied:
            value = feeds[name]
            spread = float(np.std(value.astype(np.float64))) or 1.0
            noise = rng.standard_normal(value.shape) * spread * scale
            candidate[name] = (value.astype(np.float64) + noise).astype(value.dtype)
        twin_local = session.run(candidate, where="cache probe, the twin")
        if any(not np.array_equal(twin_local[n], local[n], equal_nan=_floats(local[n])) for n in names):
            twin = candidate
            break
    else:
        return Probe(
            "inconclusive",
            f"no variation of the float inputs (up to {SCALES[-1]:g} of their spread) changed the model's answer",
        )
    if (late := _no_time(runner, left)) is not None:
        return late
    served_twin = runner.run(twin, parameters={"onnxmon_nonce": nonce}, where="cache probe, the twin")
    if (late := _no_time(runner, left)) is not None:
        return late
    served_sample = runner.run(feeds, where="cache probe, sample 0")
    facts: dict[str, Any] = {"nonce": nonce, "scale": scale, "varied_inputs": varied}
    if all(np.array_equal(served_twin[n], served_sample[n], equal_nan=_floats(served_sample[n])) for n in names):
        return Probe(
            "cached",
            "the server answered a fresh input (a nonce-varied twin of sample 0) with its answer to sample 0, bit for"
            " bit, while the model's answers to the two differ: it answers from a response cache, not the model",
            facts,
        )
    off = _outside(served_twin, twin_local, tolerances, names)
    if off and set_matches_baseline:
        worst = ", ".join(f"{n} by {e:.3g}" for n, e in off)
        return Probe(
            "cached",
            "the server's answers to the benchmark set match the baseline, but its answer to a fresh input (a"
            f" nonce-varied twin of sample 0) is off the model's ({worst}): the set is answered from a response"
            " cache, and what the server computes now is not measured",
            facts,
        )
    return Probe("not_cached", "the server computed a fresh input (a nonce-varied twin of sample 0)", facts)


def _no_time(runner: EndpointRunner, left: Callable[[], float] | None) -> Probe | None:
    """``inconclusive`` when a request of up to ``timeout_s`` might not end before the check's timeout."""
    if left is None or (remaining := left()) >= float(runner.cfg.timeout_s):
        return None
    return Probe(
        "inconclusive",
        f"not probed: {max(remaining, 0.0):.1f}s left before the check's timeout, a request may take"
        f" {float(runner.cfg.timeout_s):g}s (raise the model's timeout or lower endpoint.timeout_s)",
    )


def _floats(value: np.ndarray) -> bool:
    return value.dtype.kind in "fc"


def _outside(
    served: Mapping[str, np.ndarray],
    local: Mapping[str, np.ndarray],
    tolerances: Mapping[str, AppliedTolerance],
    names: Sequence[str],
) -> list[tuple[str, float]]:
    """Each output of ``served`` outside its tolerance of ``local`` (|a-b| <= atol + rtol*|b|), with its max |a-b|."""
    off: list[tuple[str, float]] = []
    for name in names:
        a, b = served[name], local[name]
        if a.shape != b.shape:
            off.append((name, float("inf")))
            continue
        if not _floats(b):
            if not np.array_equal(a, b):
                off.append((name, float("inf")))
            continue
        tol = tolerances[name]
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        error = np.abs(a64 - b64)
        if bool(np.any(error > tol.atol + tol.rtol * np.abs(b64))):
            off.append((name, float(np.nanmax(error))))
    return off
