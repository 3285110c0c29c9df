"""``render`` writes what the client's own encoder writes, for every Accept a scraper sends and every value.

The ground truth is prometheus_client: the encoder its ``choose_encoder`` picks for the same Accept
header, over the same registry. Hostile label values, every float the format spells its own way,
timestamps, the OpenMetrics-only samples the text format moves, and the cases ``render`` leaves to
the client (a name outside the legacy set, ``dots`` escaping, an exemplar).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import prometheus_client
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.samples import Exemplar, Sample

from monitor.sinks.prometheus.model_counts import ModelCounts
from monitor.sinks.prometheus.render import render

ACCEPTS = [
    "",
    "*/*",
    "text/plain",
    "text/plain; version=0.0.4",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/plain;version=1.0.0;escaping=underscores",
    "text/plain;version=1.0.0;escaping=dots",  # left to the client
    "text/plain;version=1.0.0;escaping=values",
    "application/openmetrics-text;version=1.0.0;escaping=values",  # left to the client: U__ before every name
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text;version=2.0.0",  # left to the client
    # Prometheus 2.x's default scrape Accept header, then 3.x's
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;"
    "version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
]
HOSTILE = ['a"b', "back\\slash", "new\nline", "", " ", "ünïcødé ✓", '\\"\n', "x" * 300, "{}=,"]
FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-05, 0.1 + 0.2, 123456789.0, 1.79653038065e9, 1e300, 5e-324, math.inf]
FLOATS += [-math.inf, math.nan, 12, True]  # an int and a bool: the client writes them as floats


class Fixed(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return self.families


def same_as_the_client(registry: Collector, accept: str) -> bytes:
    body, content_type = render(registry, accept)
    encoder, expected_type = choose_encoder(accept)
    assert content_type == expected_type
    assert body == encoder(registry), f"Accept {accept!r}: not the client's bytes"
    return body


def library_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    runs = Counter("onnxmon_runs", "Runs.", ["model"], registry=registry)
    gauge = Gauge("onnxmon_g", 'HELP with "quotes", \\ and\nnewline', ["model", "output"], registry=registry)
    histogram = Histogram("onnxmon_d", "Durations.", ["model"], buckets=(0.5, 2.5), registry=registry)
    for index, value in enumerate(HOSTILE):
        runs.labels(value).inc(index)
        gauge.labels(value, "y").set(FLOATS[index % len(FLOATS)])
        histogram.labels(value).observe(index / 3)
    Gauge("onnxmon_plain", "No labels.", registry=registry).set(-0.0)
    return registry


@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_clients_own_metrics_in_every_format(accept: str) -> None:
    same_as_the_client(library_registry(), accept)


@pytest.mark.parametrize("accept", ACCEPTS)
def test_every_float_timestamps_info_and_the_text_formats_moved_samples(accept: str) -> None:
    gauge = GaugeMetricFamily("onnxmon_values", "Values.", labels=["i"])
    for index, value in enumerate(FLOATS):
        gauge.add_metric([str(index)], value, timestamp=1_700_000_000.25 if index % 2 else None)
    counter = CounterMetricFamily("onnxmon_c", "With created.", labels=["m"])
    counter.add_metric(["a"], 3.0, created=1_700_000_000.5)
    info = InfoMetricFamily("onnxmon_build", "Info.", value={"version": "1.0", "commit": 'q"x'})
    same_as_the_client(Fixed([gauge, counter, info]), accept)


@pytest.mark.parametrize(
    "family",
    [
        GaugeMetricFamily("onnxmon:colon", "A colon, which OpenMetrics escapes in a sample name.", value=1.0),
        GaugeMetricFamily("onnxmon_reserved", "A '__' label name.", labels=["__x"]),
        GaugeMetricFamily("onnxmon_dotted", "A label name outside the legacy set.", labels=["a.b"]),
        GaugeMetricFamily("onnxmon_newline", "A label name ending in a newline.", labels=["model\n"]),
        GaugeMetricFamily("onnxmon_ends\n", "A metric name ending in a newline.", labels=["model"]),
    ],
)
@pytest.mark.parametrize("accept", ACCEPTS)
def test_names_outside_the_legacy_set_go_to_the_client(family: GaugeMetricFamily, accept: str) -> None:
    if family.name != "onnxmon:colon":
        family.add_metric(["v"], 1.0)
    same_as_the_client(Fixed([family]), accept)


@pytest.mark.parametrize("accept", ["application/openmetrics-text; version=1.0.0", ""])
def test_an_exemplar_goes_to_the_client(accept: str) -> None:
    family = CounterMetricFamily("onnxmon_ex", "Exemplar.", labels=["m"])
    family.samples.append(Sample("onnxmon_ex_total", {"m": "a"}, 1.0, None, Exemplar({"trace": "t"}, 1.0)))
    same_as_the_client(Fixed([family]), accept)


@given(
    values=st.lists(st.text(max_size=12), min_size=1, max_size=6),
    numbers=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=6),
)
def test_any_label_value_and_float(values: list[str], numbers: list[float]) -> None:
    family = GaugeMetricFamily("onnxmon_any", "Any.", labels=["model", "output"])
    for index, value in enumerate(values):
        family.add_metric([value, str(index)], numbers[index % len(numbers)])
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        same_as_the_client(Fixed([family]), accept)


def test_model_counts_serve_what_the_clients_counter_serves() -> None:
    """Declare, increase, remove and declare again: the same series, in the same order, as a client ``Counter``."""
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # as metrics.install does: no `_created` beside a counter
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counter = Counter("onnxmon_runs", "Runs.", ["model", "reason"], registry=theirs)
    counts = ModelCounts()
    runs = counts.counter("onnxmon_runs", "Runs.", ["model", "reason"])
    ours.register(counts)
    for model, reason, amount in [("a", "x", 0.0), ("b", "y", 2.0), ("a", "x", 1.5), ('c"\n', "z", 0.0)]:
        counter.labels(model, reason).inc(amount)
        runs.declare(model, reason)
        runs.inc(model, reason, amount=amount)
    counter.remove("a", "x")
    runs.remove("a", "x")
    runs.remove("never", "declared")
    counter.labels("a", "x")
    runs.declare("a", "x")
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        assert render(ours, accept)[0] == choose_encoder(accept)[0](theirs)
    assert runs.value("b", "y") == 2.0 and runs.value("a", "x") == 0.0
    with pytest.raises(ValueError, match="only increases"):
        runs.inc("a", "x", amount=-1.0)
    with pytest.raises(ValueError, match="labels"):
        runs.inc("a")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Counter("onnxmon_runs", "The same name again: ModelCounts.describe reserved it.", registry=ours)


def test_model_histograms_serve_what_the_clients_histogram_serves() -> None:
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # as metrics.install does
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    buckets = (0.5, 2.5, 10.0, 60.0, 300.0)
    histogram = Histogram("onnxmon_run_duration_seconds", "Wall time.", ["model"], buckets=buckets, registry=theirs)
    counts = ModelCounts()
    durations = counts.histogram("onnxmon_run_duration_seconds", "Wall time.", ["model"], buckets)
    ours.register(counts)
    observed = [("a", 0.0), ("a", 0.5), ("b", 0.50001), ("a", 2.5), ("b", 61.0), ("a", 1e9), ("c", 0.1 + 0.2)]
    observed += [("d", math.nan), ("d", math.inf), ("d", 300.0)]  # NaN: in no bucket, only in the sum
    for model, value in [("z", None), *observed]:
        if value is None:  # declared, never observed
            histogram.labels(model)
            durations.declare(model)
            continue
        histogram.labels(model).observe(value)
        durations.observe(model, value=value)
    histogram.remove("b")
    durations.remove("b")
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        assert render(ours, accept)[0] == choose_encoder(accept)[0](theirs)


@pytest.mark.parametrize("value", [np.float64(2.5), np.array(2.5), np.float32(-0.0), np.int64(7)])
def test_numpy_values_as_the_client_writes_them(value: object) -> None:
    family = GaugeMetricFamily("onnxmon_np", "A numpy value.")
    family.samples.append(Sample("onnxmon_np", {}, value))  # type: ignore[arg-type]
    for accept in ("", "application/openmetrics-text; version=1.0.0"):
        same_as_the_client(Fixed([family]), accept)
