"""The ``/metrics`` body: the registry's families, in the format the client's ``choose_encoder`` picks.

prometheus_client decides the format (``choose_encoder``: text 0.0.4 or 1.0.0, OpenMetrics 1.0.0
for Prometheus, which asks for it first) and collects every family (``registry.collect()``, its
public API). Its encoders then check every metric and label name against a regular expression and
escape every label value again for each sample, which is most of a scrape with many models.
``render`` writes the same bytes from the same collected families with each name checked, and each
label set, label pair and value written, once per scrape. ``tests/test_render.py`` and
``tests/test_exposition.py`` hold every body equal, to the byte, to the client's own encoder over
the same families, in each format and escaping; ``bench/bench_scrape.py`` measures both.

What it does not write goes to the client's encoder, over the families already collected:
a name outside the legacy character set, the ``dots`` and ``values`` escapings, OpenMetrics 2.0, an
exemplar or a native histogram. Nothing is kept between two scrapes.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import exposition
from prometheus_client.core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

# names every escaping and both encoders leave as they are (OpenMetrics escapes a sample name's ':')
_METRIC_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_LABEL_NAME = re.compile(r"^(?!__)[a-zA-Z_][a-zA-Z0-9_]*$")  # '__' starts the names Prometheus reserves
# the escapings that leave a legacy name as it is in both formats (``dots`` doubles its underscores,
# ``values`` prefixes every OpenMetrics sample name with ``U__``)
_SAME_FOR_LEGACY = {openmetrics.UNDERSCORES, openmetrics.ALLOWUTF8}
# OpenMetrics-only samples the text format moves into a gauge family of their own, after the family
_TEXT_APART = ("_created", "_gsum", "_gcount")
# the text format's type for each OpenMetrics type, and the suffix its family name takes
_TEXT_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_TEXT_SUFFIX = {"counter": "_total", "info": "_info"}
_NATIVE = "native_histogram" in Sample._fields  # the clients that have native histograms (0.23 on)


class _Unsupported(Exception):
    """Something only the client's encoder writes; the body is left to it."""


class _Collected(Collector):
    """Families already collected, offered again to the client's encoder (one read of the store per scrape)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(registry: Collector, accept: str) -> tuple[bytes, str]:
    """The body and content type for a scraper sending ``accept``."""
    encoder, content_type = exposition.choose_encoder(accept)
    openmetrics_format = _fast_format(encoder)
    families = list(registry.collect())
    if openmetrics_format is not None:
        try:
            return _encode(families, openmetrics_format=openmetrics_format), content_type
        except _Unsupported:
            pass
    return encoder(_Collected(families)), content_type


def _fast_format(encoder: Callable[..., bytes]) -> bool | None:
    """Whether ``encoder`` writes OpenMetrics (True) or text (False); None when ``render`` leaves it to the client."""
    if encoder is exposition.generate_latest:
        return False
    if not isinstance(encoder, functools.partial) or encoder.args:
        return None
    keywords = dict(encoder.keywords)
    if keywords.pop("escaping", openmetrics.UNDERSCORES) not in _SAME_FOR_LEGACY:
        return None
    if encoder.func is exposition.generate_latest and not keywords:
        return False
    if encoder.func is openmetrics.generate_latest and keywords in ({}, {"version": "1.0.0"}):
        return True
    return None


def _encode(families: list[Metric], *, openmetrics_format: bool) -> bytes:
    labels_of, value_of = _LabelStrings(), _Values()
    lines: list[str] = []
    for family in families:
        name = _checked(family.name, _METRIC_NAME)
        lines.append(_header(family, openmetrics_format=openmetrics_format))
        apart = {} if openmetrics_format else {name + suffix: suffix for suffix in _TEXT_APART}
        moved: dict[str, list[str]] = {}
        names: set[str] = set()  # the family's sample names checked so far
        for sample in family.samples:
            sample_name, labels, value, timestamp, exemplar = sample[:5]
            if sample_name not in names:
                names.add(_checked(sample_name, _METRIC_NAME))
            if timestamp is None and not exemplar and value is not None and not (_NATIVE and sample.native_histogram):
                line = f"{sample_name}{labels_of(labels)} {value_of(value)}\n"  # nearly every sample
            else:
                line = f"{sample_name}{labels_of(labels)} {_value(sample, value_of, openmetrics_format)}\n"
            suffix = apart.get(sample_name)
            if suffix is None:
                lines.append(line)
            else:
                moved.setdefault(suffix, []).append(line)
        for suffix, moved_lines in sorted(moved.items()):
            help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
            lines.append(f"# HELP {name}{suffix} {help_text}\n# TYPE {name}{suffix} gauge\n")
            lines.extend(moved_lines)
    if openmetrics_format:
        lines.append("# EOF\n")
    return "".join(lines).encode("utf-8")


def _header(family: Metric, *, openmetrics_format: bool) -> str:
    """The family's ``# HELP`` and ``# TYPE`` lines (and ``# UNIT``, OpenMetrics only)."""
    name, documentation = family.name, family.documentation
    if openmetrics_format:
        help_text = documentation.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        unit = f"# UNIT {name} {family.unit}\n" if family.unit else ""
        return f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n{unit}"
    help_text = documentation.replace("\\", r"\\").replace("\n", r"\n")
    shown = name + _TEXT_SUFFIX.get(family.type, "")
    return f"# HELP {shown} {help_text}\n# TYPE {shown} {_TEXT_TYPES.get(family.type, family.type)}\n"


def _value(sample: Sample, value_of: _Values, openmetrics_format: bool) -> str:
    """The sample's value and timestamp as the format writes them (milliseconds in text, seconds in OpenMetrics)."""
    value, timestamp = sample.value, sample.timestamp
    if value is None or sample.exemplar or (_NATIVE and sample.native_histogram):
        raise _Unsupported
    if timestamp is None:
        return value_of(value)
    stamp = timestamp if openmetrics_format else f"{int(float(timestamp) * 1000):d}"
    return f"{value_of(value)} {stamp}"


class _LabelStrings:
    """``{k="v",...}``, sorted by name and escaped, written once per label set in one ``render``.

    Keyed by the items in their order (the client's counters make a new dict per sample; a dict of
    the same labels in another order is only written twice); each ``name="value"`` pair is written
    once too (a model's name labels some sixty series).
    """

    def __init__(self) -> None:
        self.written: dict[tuple[tuple[str, str], ...], str] = {}
        self.pairs: dict[tuple[str, str], str] = {}

    def __call__(self, labels: Mapping[str, str]) -> str:
        items = tuple(labels.items())
        text = self.written.get(items)
        if text is None:
            pairs = self.pairs
            text = ",".join([pairs.get(item) or self._pair(item) for item in sorted(items)])
            text = self.written[items] = "{" + text + "}" if items else ""
        return text

    def _pair(self, item: tuple[str, str]) -> str:
        """``key="value"``, the name checked, the value's backslash, newline and double quote escaped."""
        key, value = item
        escaped = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        pair = self.pairs[item] = f'{_checked(key, _LABEL_NAME)}="{escaped}"'
        return pair


class _Values:
    """The client's ``floatToGoString`` of each value, once per value in one ``render``: most repeat (three
    in four are 0, then 1, a tolerance, NaN). 0.0 and -0.0 are one key but two texts: the sign picks."""

    def __init__(self) -> None:
        self.written: dict[float, str] = {}
        self.zeros: tuple[str, str] = (floatToGoString(0.0), floatToGoString(-0.0))  # type: ignore[no-untyped-call]

    def __call__(self, value: float) -> str:
        value = float(value)  # as the client's floatToGoString does first (a numpy 0-d array is no dict key)
        if value == 0:
            return self.zeros[math.copysign(1.0, value) < 0]
        text = self.written.get(value)
        if text is None:
            text = self.written[value] = floatToGoString(value)  # type: ignore[no-untyped-call]
        return text


@functools.lru_cache(maxsize=4096)  # a pure function of the name: the family and label names, a bounded set
def _legacy(name: str, pattern: re.Pattern[str]) -> bool:
    return pattern.fullmatch(name) is not None  # not ``match``: its ``$`` also matches before a final newline


def _checked(name: str, pattern: re.Pattern[str]) -> str:
    """``name`` when every escaping leaves it as it is; else the body goes to the client's encoder."""
    if not _legacy(name, pattern):
        raise _Unsupported
    return name
