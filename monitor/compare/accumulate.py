"""Compare outputs one sample at a time: memory bounded by one sample, not by the benchmark set.

``OutputAccumulator`` takes one output's (actual, baseline) pair per sample and finishes into
the same ``OutputStats`` as ``compare_output`` over lists, to the bit: that function is a thin
wrapper over it. ``Comparison`` holds one accumulator per baseline output and is what a check
feeds after each sample, dropping the sample's arrays before the next one runs.

What needs the whole output is known up front instead: the element count (the baseline's
shapes times its samples, ``Baseline.element_counts``) fixes the chunk size and
the p99 candidates, so a float output's metrics do not depend on how the same data is split
into samples. Everything else is per sample: the layout checks (dtype, shape), the equality-only
path (strings, objects), top-k agreement (counted per row) and missing outputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from monitor.compare import judge
from monitor.compare.decisions import DecisionCounter, DecisionRule, tiered
from monitor.compare.decisions import judge as judge_decisions
from monitor.compare.stream import DEFAULT_CHUNK_ELEMENTS, ChunkStream
from monitor.errors import ConfigError
from monitor.results import AppliedTolerance, OutputMetrics, OutputStats, Reason, Verdict

Array = npt.NDArray[np.generic]
_F64 = np.dtype(np.float64)


class OutputAccumulator:
    """One output's comparison, fed one sample at a time; ``finish`` judges it. Never raises on bad data.

    ``samples`` is the baseline's sample count and ``elements`` the baseline's element count over
    all of them. After the first layout problem the rest is not measured (the result is an error).
    ``decision``: what the output decides
    (``compare/decisions.py``), counted per sample beside the metrics.
    """

    def __init__(
        self,
        name: str,
        tolerance: AppliedTolerance,
        *,
        samples: int,
        elements: int,
        chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
        decision: DecisionRule | None = None,
    ) -> None:
        if chunk_elements < 1 or (tolerance.topk_k is not None and tolerance.topk_k < 1):
            detail = f"{chunk_elements} and {tolerance.topk_k}"
            raise ValueError(f"chunk_elements and topk_k must be >= 1, got {detail}")
        self.name, self.tolerance, self.samples, self.elements = name, tolerance, samples, elements
        self.chunk = chunk_elements
        self.fed = 0
        self.first: tuple[np.dtype[np.generic], np.dtype[np.generic]] | None = None
        self.observed: tuple[np.dtype[np.generic], tuple[int, ...]] = (_F64, (0,))
        self.shape: tuple[int, ...] = ()
        self.problem: Reason | None = None
        self.drift: Reason | None = None
        self.stream: ChunkStream | None = None
        self.equality = [0, 0]  # element count, differing elements (strings, objects, ...)
        self.topk = [0, 0]  # rows, agreeing rows
        self.decider = DecisionCounter(name, decision) if decision is not None else None

    def feed(self, actual: object, expected: object) -> None:
        """Compare one sample's output with its baseline; the arrays are not kept."""
        index, self.fed = self.fed, self.fed + 1
        if self.problem is not None:
            return
        a, b = np.asarray(actual), np.asarray(expected)
        if self.first is None:
            self._start(a, b)
        assert self.first is not None
        self.problem = judge.layout_problem(self.name, index, a, b, self.first)
        if self.problem is None and self.decider is not None:  # on the arrays as produced, before any widening
            self.problem = self.decider.feed(index, a, b)
        if self.problem is not None:
            self.stream = None  # nothing more will be measured: free the buffers
            return
        if self.drift is not None:  # two float dtypes: both sides in float64
            a, b = a.astype(np.float64), b.astype(np.float64)
        if self.stream is not None:
            self.stream.feed(a, b)
        else:
            self.equality[0] += a.size
            self.equality[1] += int(np.count_nonzero(a != b))
        if self.tolerance.topk_k is not None:
            rows, agree = _topk_counts(a, b, self.tolerance.topk_k, self.chunk)
            self.topk[0] += rows
            self.topk[1] += agree

    def finish(self, actual_samples: int | None = None) -> OutputStats:
        """The stats of everything fed; ``actual_samples`` (default: the samples fed) the model produced."""
        n_actual = self.fed if actual_samples is None else actual_samples
        problem = judge.sample_count_problem(self.name, n_actual, self.samples) or self.problem
        if problem is not None:
            return judge.error_stats(self.name, self.tolerance, problem, *self.observed)
        if self.first is None:  # no samples at all: an empty float comparison
            self.stream = self._stream(_F64, exact=False)
        dtype = self.first[1] if self.first is not None else _F64
        if self.stream is not None:
            metrics, finite_mismatches = self.stream.finish()
        else:
            metrics, finite_mismatches = _equality_only(*self.equality), 0
        if self.drift is not None:
            metrics = _replace(metrics, bitwise_equal=False)
        if self.tolerance.topk_k is not None:
            metrics = _replace(metrics, topk_agreement=self.topk[1] / self.topk[0] if self.topk[0] else None)
        reasons = judge.judge(self.name, metrics, self.tolerance, finite_mismatches, exact=dtype.kind != "f")
        if self.drift is not None:
            reasons = (self.drift, *reasons)
        decided = self.decider.finish() if self.decider is not None else None
        changed = judge_decisions(self.name, decided, self.tolerance) if decided is not None else None
        reasons = (*reasons, changed) if changed is not None else reasons
        return OutputStats(
            name=self.name,
            verdict=Verdict.FAIL if reasons else Verdict.PASS,
            metrics=metrics,
            tolerance=self.tolerance,
            reasons=reasons,
            dtype=str(self.observed[0]),
            shape=self.shape,
            decisions=decided,
        )

    def _start(self, a: Array, b: Array) -> None:
        """Sample 0 decides the path: float (maybe across float dtypes), exact, or equality only."""
        self.first, self.observed, self.shape = (a.dtype, b.dtype), (a.dtype, tuple(a.shape)), tuple(b.shape)
        if judge.is_float(a.dtype) and judge.is_float(b.dtype):
            self.drift = judge.float_dtype_drift(self.name, a.dtype, b.dtype)
            if self.drift is not None:  # ULPs in the coarser of the two dtypes
                self.stream = self._stream(_F64, exact=False, ulp_dtype=min(a.dtype, b.dtype, key=lambda d: d.itemsize))
            else:
                self.stream = self._stream(b.dtype, exact=False)
        elif b.dtype.kind in "iub" and a.dtype == b.dtype:
            self.stream = self._stream(b.dtype, exact=True)

    def _stream(
        self, dtype: np.dtype[np.generic], *, exact: bool, ulp_dtype: np.dtype[np.generic] | None = None
    ) -> ChunkStream:
        return ChunkStream(
            dtype,
            self.tolerance,
            self.chunk,
            exact=exact,
            elements=self.elements,
            ulp_dtype=ulp_dtype,
        )


class Comparison:
    """Every baseline output's accumulator: what a check feeds after each sample.

    ``produced`` names the outputs the model has; a baseline output it lacks is ``missing_output``.
    ``tolerances`` must hold every baseline output name (the caller merges defaults). ``decisions``
    (``models[].decisions``) must name outputs the model produces; ``finish`` applies the two-tier rule.
    """

    def __init__(
        self,
        expected: Sequence[str],
        produced: Sequence[str],
        tolerances: Mapping[str, AppliedTolerance],
        *,
        samples: int,
        elements: Mapping[str, int],
        decisions: Mapping[str, DecisionRule] | None = None,
    ) -> None:
        missing_tol = [name for name in expected if name not in tolerances]
        if missing_tol:
            raise ValueError(f"no tolerance for outputs {missing_tol}; tolerances cover {sorted(tolerances)}")
        rules = dict(decisions or {})
        unknown = sorted(set(rules) - set(produced))
        if unknown:
            raise ConfigError(f"decisions name {unknown}, not outputs of the model; outputs are {list(produced)}")
        self.tolerances, self.produced = tolerances, sorted(produced)
        self.accumulators = {
            name: OutputAccumulator(
                name, tolerances[name], samples=samples, elements=elements[name], decision=rules.get(name)
            )
            for name in expected
            if name in produced
        }
        self.expected = list(expected)
        self.missing_first: dict[str, np.ndarray] = {}  # a missing output's first baseline, for its dtype/shape

    def feed(self, actual: Mapping[str, object], expected: Mapping[str, object]) -> None:
        """One sample: the model's outputs and the baseline's."""
        for name in self.expected:
            accumulator = self.accumulators.get(name)
            if accumulator is not None:
                accumulator.feed(actual[name], expected[name])
            elif name not in self.missing_first:
                self.missing_first[name] = np.asarray(expected[name])

    def finish(self, actual_samples: int | None = None) -> tuple[OutputStats, ...]:
        """Stats for every output that has a baseline, in baseline order."""
        results = []
        for name in self.expected:
            accumulator = self.accumulators.get(name)
            if accumulator is not None:
                results.append(accumulator.finish(actual_samples))
            else:
                results.append(missing(name, self.tolerances[name], self.produced, self.missing_first.get(name)))
        return tiered(results)


def missing(name: str, tolerance: AppliedTolerance, produced: Sequence[str], first: np.ndarray | None) -> OutputStats:
    """The error of a baseline output the model did not produce (``first``: its first baseline sample)."""
    detail = f"output {name!r} has a baseline but the model did not produce it; produced: {sorted(produced)}"
    observed = first if first is not None else np.zeros(0)
    return judge.error_stats(
        name, tolerance, Reason("missing_output", detail, output=name), observed.dtype, tuple(observed.shape)
    )


def _replace(metrics: OutputMetrics, **changes: object) -> OutputMetrics:
    import dataclasses

    return dataclasses.replace(metrics, **changes)  # type: ignore[arg-type]


def _equality_only(count: int, differ: int) -> OutputMetrics:
    return OutputMetrics(
        element_count=count,
        mismatch_count=differ,
        mismatch_ratio=differ / count if count else 0.0,
        bitwise_equal=differ == 0,
        error_ratio=math.inf if differ else 0.0,
    )


def _topk_counts(a: Array, b: Array, k: int, chunk: int) -> tuple[int, int]:
    """(rows, rows whose top-k index sets match) along the last axis of one sample."""
    if a.ndim == 0 or a.shape[-1] == 0 or a.dtype.kind not in "fiub":
        return 0, 0
    rows = agree = 0
    width = a.shape[-1]
    rows_a, rows_b = a.reshape(-1, width), b.reshape(-1, width)
    step = max(1, chunk // width)
    for start in range(0, rows_a.shape[0], step):
        top_a = _topk_sets(rows_a[start : start + step], k)
        top_b = _topk_sets(rows_b[start : start + step], k)
        agree += int(np.count_nonzero((top_a == top_b).all(axis=1)))
        rows += top_a.shape[0]
    return rows, agree


def _topk_sets(rows: Array, k: int) -> npt.NDArray[np.intp]:
    """Sorted indices of each row's k largest values (NaN never ranks high)."""
    width = rows.shape[-1]
    negated = -rows.astype(np.float64)
    if k >= width:
        return np.broadcast_to(np.arange(width), negated.shape)
    return np.sort(np.argpartition(negated, k - 1, axis=-1)[:, :k], axis=-1)
