"""The ``/metrics`` body from cached pieces: the same bytes as ``generate_latest``, without re-rendering ~11k series.

A scrape used to build and format every series (about 11k at 200 models) although almost none
change between two scrapes: runs are immutable and land once per interval, counters move once per
run. ``Exposition.render`` gives the body of prometheus_client's own encoder for the scraper's
``Accept`` (text or OpenMetrics), to the byte (``tests/test_exposition.py`` compares the two over
a real store), from three caches:

* **each model's block of store gauges** (``StoreCollector``'s families), kept under a key of
  everything ``StoreCollector._model`` reads: the declared config (its declare count, never its
  ``id()``, which a new config at a freed address could share), the model's last run (its id:
  runs never change) and its stored diagnosis's cause, the active baseline (its ``ACTIVE`` file's
  identity, ``Metrics``), the model's in-memory state and the environment fingerprint, and whether
  the store answered. A new run, a diagnosis landing, a promotion, a reload or a model leaving the
  config changes the key and only that model's block is rendered again;
* **each labelled child of the counters**, kept while ``Metrics`` reports no change of its model
  (``model_changes``, bumped after every method that moves a model's series) nor of the config
  (``generation``); the children are walked through prometheus_client's ``_metrics`` /
  ``_samples``, in the order its ``collect`` uses (the byte-for-byte tests guard that private
  contract);
* **every family's header** (``# HELP`` / ``# TYPE``).

Each piece is formatted by prometheus_client's own encoder (a one-family registry), so the
escaping and number formatting are its, never a copy. Only what the last scrape used is kept, so
the caches hold one scrape's worth of text. ``bench/bench_daemon.py`` measures the scrape.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

Encoder = Callable[[Collector], bytes]
_FORMATS = 4  # content types whose pieces are kept (text, OpenMetrics, a version or escaping more)


class FamilySet(Protocol):
    """One model's block (or the global families) of ``collector.StoreCollector``."""

    def globals(self) -> Sequence[Metric]: ...
    def per_model(self) -> Sequence[Metric]: ...


class Frame(Protocol):
    @property
    def global_families(self) -> FamilySet: ...
    @property
    def models(self) -> Sequence[tuple[tuple[object, ...], Callable[[], FamilySet]]]: ...


class Counted(Protocol):
    """``counters.Metrics``: ``changes`` grows after every change of its labelled series,
    ``generation`` after one that may touch every model's, ``model_changes[m]`` after one of model m's."""

    @property
    def changes(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def model_changes(self) -> dict[str, int]: ...


class StoreCollector(Collector, Protocol):
    """``collector.StoreCollector`` as the exposition sees it (a protocol: that module imports this one)."""

    @property
    def metrics(self) -> Counted: ...

    def frame(self) -> Frame: ...


_installed: weakref.WeakKeyDictionary[CollectorRegistry, Exposition] = weakref.WeakKeyDictionary()


def render(registry: CollectorRegistry, accept: str) -> tuple[bytes, str]:
    """The body and content type of a scrape of ``registry``: cached when ``install`` set it up."""
    exposition = _installed.get(registry)
    if exposition is None:
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type
    return exposition.render(accept)


def install(registry: CollectorRegistry, collector: StoreCollector) -> Exposition:
    """Serve ``registry``'s scrapes from an ``Exposition`` (``collector``: its store gauges)."""
    exposition = Exposition(registry, collector)
    _installed[registry] = exposition
    return exposition


class _One(Collector):
    """A registry of one family, to have the real encoder format a piece."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self.metric]


class Exposition:
    """A registry's scrape, rendered from the pieces the previous scrape already formatted."""

    def __init__(self, registry: CollectorRegistry, collector: StoreCollector) -> None:
        self.registry, self.collector = registry, collector
        self._lock = threading.Lock()
        self._headers: dict[tuple[str, str, str, str], str] = {}  # bounded: families x formats
        self._kept: dict[str, dict[Any, Any]] = {}  # per content type: what its last scrape used
        self._format = ""  # this scrape's content type (the encoders are fresh partials each time)
        self._lines: dict[Any, Any] = {}  # the pieces the last scrape in this format used
        self._used: dict[Any, Any] = {}  # the pieces this scrape uses: kept for the next one

    def render(self, accept: str) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept)
        with self._lock:  # scrapes share the caches; one at a time
            self._format = content_type
            self._lines, self._used = self._kept.get(content_type, {}), {}
            with self.registry._lock:  # the registration order is the exposition's order
                collectors = list(self.registry._collector_to_names)
            pieces = [self._collector(collector, encoder) for collector in collectors]
            self._kept.pop(content_type, None)
            self._kept[content_type] = self._used  # one scrape's worth per format, never more
            while len(self._kept) > _FORMATS:  # the Accept header is the scraper's to choose
                del self._kept[next(iter(self._kept))]
            if len(self._headers) > _FORMATS * 256:
                self._headers.clear()
        body = "".join(pieces)
        trailer = encoder(_Empty())  # "" for text, "# EOF\n" for OpenMetrics
        return (body.encode("utf-8") + trailer), content_type

    # --- pieces ------------------------------------------------------------------------------------

    def _collector(self, collector: Collector, encoder: Encoder) -> str:
        if collector is self.collector:
            return self._store_gauges(encoder)
        if isinstance(collector, MetricWrapperBase):
            return self._wrapper(collector, encoder)
        return "".join(self._family(metric, encoder) for metric in collector.collect())

    def _wrapper(self, wrapper: MetricWrapperBase, encoder: Encoder) -> str:
        """A counter, gauge or histogram: each labelled child's lines reused while its values stand still."""
        metric = wrapper._get_metric()  # type: ignore[no-untyped-call]
        pieces = [self._header(metric, encoder)]
        if not wrapper._is_parent():  # type: ignore[no-untyped-call]
            own = [Sample(wrapper._name + s[0], *s[1:]) for s in wrapper._samples()]  # type: ignore[attr-defined]
            pieces.append(self._samples(metric, own, encoder))
            return "".join(pieces)
        changes = self.collector.metrics.changes
        whole = (self._format, "family", metric.name, changes)  # no change since: the family's text as it was
        found = self._cached(whole)
        if found is not None:  # (text, the children's keys): those stay kept for the next change
            self._keep(whole, found)
            for child_key in found[1]:
                self._keep(child_key, self._cached(child_key))
            return str(found[0])
        kept: list[Any] = []
        with wrapper._lock:  # type: ignore[attr-defined]
            children = list(wrapper._metrics.items())  # type: ignore[attr-defined]
        names = wrapper._labelnames  # type: ignore[attr-defined]
        counts = self.collector.metrics
        generation, per_model = counts.generation, counts.model_changes
        for values, child in children:
            # a child's lines stand while neither the whole config nor its model (the first label) changed
            key: Any = (self._format, metric.name, values, generation, per_model.get(values[0], 0))
            line = self._cached(key)
            if line is None:
                samples = tuple(child._samples())
                if not all(s[3] is None and s[4] is None for s in samples):  # timestamps, exemplars: never kept
                    key = None
                series = dict(zip(names, values, strict=True))
                full = [Sample(wrapper._name + s[0], {**series, **s[1]}, *s[2:]) for s in samples]  # type: ignore[attr-defined]
                line = self._samples(metric, full, encoder)
            self._keep(key, line)
            kept.append(key)
            pieces.append(line)
        text = "".join(pieces)
        if changes == self.collector.metrics.changes:  # nothing moved while this walk ran
            self._keep(whole, (text, [key for key in kept if key is not None]))
        return text

    def _store_gauges(self, encoder: Encoder) -> str:
        """``StoreCollector``'s families: the two global ones fresh, each model's block from the cache."""
        frame = self.collector.frame()
        global_families, models = frame.global_families, []
        for key, build in frame.models:
            block = self._cached((self._format, "block", key))
            if block is None:
                block = [self._samples(f, f.samples, encoder) for f in build().per_model()]
            self._keep((self._format, "block", key), block)
            models.append(block)
        pieces = [self._family(family, encoder) for family in global_families.globals()]
        for index, family in enumerate(global_families.per_model()):
            pieces.append(self._header(family, encoder))
            pieces.extend(block[index] for block in models)
        return "".join(pieces)

    def _family(self, metric: Metric, encoder: Encoder) -> str:
        return self._header(metric, encoder) + self._samples(metric, metric.samples, encoder)

    def _header(self, metric: Metric, encoder: Encoder) -> str:
        key = (metric.name, metric.type, metric.documentation, self._format)
        if key not in self._headers:
            self._headers[key] = _strip(encoder(_One(_like(metric))), keep_comments=True)
        return self._headers[key]

    def _samples(self, metric: Metric, samples: Sequence[Sample], encoder: Encoder) -> str:
        if not samples:
            return ""
        shell = _like(metric)
        shell.samples = list(samples)
        return _strip(encoder(_One(shell)), keep_comments=False)

    def _cached(self, key: Any) -> Any:
        if key is None:
            return None
        found = self._used.get(key)
        return found if found is not None else self._lines.get(key)

    def _keep(self, key: Any, value: Any) -> None:
        if key is not None:
            self._used[key] = value


class _Empty(Collector):
    def collect(self) -> Iterable[Metric]:
        return []


def _like(metric: Metric) -> Metric:
    """An empty family with ``metric``'s name, help, type and unit."""
    return Metric(metric.name, metric.documentation, metric.type, metric.unit)


def _strip(text: bytes, *, keep_comments: bool) -> str:
    """The header lines (``keep_comments``) or the sample lines of one encoded family, without ``# EOF``."""
    lines = text.decode("utf-8").splitlines(keepends=True)
    return "".join(line for line in lines if line != "# EOF\n" and line.startswith("# ") == keep_comments)
