"""The counters and the histogram labelled by model: plain numbers, served through the client's collector API.

The client's ``Counter`` and ``Histogram`` keep an object per label set, each with its own lock
and value holders, and build two dicts per sample at every scrape: with one series per model in
each of eleven families, a good part of a scrape (``bench/bench_scrape.py``). A ``Counts``
is a dict from label values to a number, a ``Histograms`` one from label values to bucket counts
and a sum, all under the one lock of their ``ModelCounts``; ``ModelCounts.collect`` builds one
family each with a sample per label set, in the order the label sets were first declared, as the
client orders its children, named, typed and valued as the client's own metrics are
(``tests/test_render.py`` holds the bytes equal to a client ``Counter``'s and ``Histogram``'s).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


class Counts:
    """One counter family: a number per label set, declared at 0, only ever increased."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], lock: threading.Lock) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._mutex = lock
        self._values: dict[tuple[str, ...], float] = {}

    def declare(self, *labels: str) -> None:
        """The label set's series, at 0 until it moves (kept where it already is)."""
        key = _key(self.name, self.labelnames, labels)
        with self._mutex:
            self._values.setdefault(key, 0.0)

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        if amount < 0:  # as the client's Counter: it only goes up
            raise ValueError(f"{self.name}: a counter only increases, not by {amount}")
        key = _key(self.name, self.labelnames, labels)
        with self._mutex:
            self._values[key] = self._values.get(key, 0.0) + amount

    def remove(self, *labels: str) -> None:
        """Drop the label set's series (nothing when it was never declared)."""
        key = _key(self.name, self.labelnames, labels)
        with self._mutex:
            self._values.pop(key, None)

    def value(self, *labels: str) -> float | None:
        with self._mutex:
            return self._values.get(_key(self.name, self.labelnames, labels))

    def family(self) -> Metric:
        """The family as scraped now (call with the lock held)."""
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        sample_name, names = f"{self.name}_total", self.labelnames
        family.samples.extend(
            Sample(sample_name, dict(zip(names, key, strict=True)), value) for key, value in self._values.items()
        )
        return family


class Histograms:
    """One histogram family: per label set, the observations per bucket (not cumulative) and their sum."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float], mutex: threading.Lock
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        if list(buckets) != sorted(buckets) or not buckets or buckets[0] < 0:
            raise ValueError(f"{name}: buckets must be sorted and >= 0, not {buckets}")
        self.bounds = [float(bound) for bound in buckets if bound != math.inf] + [math.inf]
        self._les = [floatToGoString(bound) for bound in self.bounds]  # type: ignore[no-untyped-call]
        self._mutex = mutex
        self._values: dict[tuple[str, ...], tuple[list[float], list[float]]] = {}

    def declare(self, *labels: str) -> None:
        key = _key(self.name, self.labelnames, labels)
        with self._mutex:
            self._values.setdefault(key, ([0.0] * len(self.bounds), [0.0]))

    def observe(self, *labels: str, value: float) -> None:
        key = _key(self.name, self.labelnames, labels)
        with self._mutex:
            buckets, total = self._values.setdefault(key, ([0.0] * len(self.bounds), [0.0]))
            index = bisect.bisect_left(self.bounds, value)
            if index < len(self.bounds) and value <= self.bounds[index]:  # NaN: in no bucket, as the client's
                buckets[index] += 1.0
            total[0] += value

    def remove(self, *labels: str) -> None:
        key = _key(self.name, self.labelnames, labels)
        with self._mutex:
            self._values.pop(key, None)

    def family(self) -> Metric:
        """The family as scraped now: cumulative buckets, count, sum per label set (call with the lock held)."""
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        bucket, count, total = f"{self.name}_bucket", f"{self.name}_count", f"{self.name}_sum"
        for key, (buckets, sums) in self._values.items():
            labels = dict(zip(self.labelnames, key, strict=True))
            cumulative = 0.0
            for le, observed in zip(self._les, buckets, strict=True):
                cumulative += observed
                family.samples.append(Sample(bucket, {**labels, "le": le}, cumulative))
            family.samples.extend((Sample(count, labels, cumulative), Sample(total, labels, sums[0])))
        return family


class ModelCounts(Collector):
    """The labelled counters of ``counters.Metrics``, registered as one collector, collected in their order."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._counts: list[Counts | Histograms] = []

    def counter(self, name: str, documentation: str, labelnames: Sequence[str]) -> Counts:
        counts = Counts(name, documentation, labelnames, self._mutex)
        self._counts.append(counts)
        return counts

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str], buckets: Sequence[float]
    ) -> Histograms:
        histograms = Histograms(name, documentation, labelnames, buckets, self._mutex)
        self._counts.append(histograms)
        return histograms

    def describe(self) -> Iterable[Metric]:
        """The families without samples: registering reserves their names and reads nothing."""
        return [
            (CounterMetricFamily if isinstance(c, Counts) else HistogramMetricFamily)(
                c.name, c.documentation, labels=c.labelnames
            )
            for c in self._counts
        ]

    def collect(self) -> Iterable[Metric]:
        with self._mutex:
            return [counts.family() for counts in self._counts]


def _key(name: str, labelnames: tuple[str, ...], labels: tuple[str, ...]) -> tuple[str, ...]:
    if len(labels) != len(labelnames):
        raise ValueError(f"{name}: labels {labelnames}, given {labels}")
    return tuple(str(label) for label in labels)
