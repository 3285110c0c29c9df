"""``/metrics`` reads private parts of prometheus_client: pyproject bounds the version, and each part is checked.

``monitor/sinks/prometheus/exposition.py`` walks the registry's collectors and a metric wrapper's
children through attributes prometheus_client does not promise to keep. ``pyproject.toml`` therefore
allows only the minor releases this suite ran on (``<0.27``); before raising the bound, run this file
and ``tests/test_exposition.py`` (the byte-for-byte comparison with ``generate_latest``) on the new
release. The list below is read back from the source, so a new private use cannot slip in unnamed.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.samples import Sample

ROOT = Path(__file__).resolve().parents[1]
EXPOSITION = ROOT / "monitor" / "sinks" / "prometheus" / "exposition.py"

# receiver in exposition.py -> the private attributes it reads on it
PRIVATE = {
    "registry": {"_lock", "_collector_to_names"},
    "wrapper": {"_get_metric", "_is_parent", "_name", "_samples", "_lock", "_metrics", "_labelnames"},
    "child": {"_samples"},
}


def the_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (found,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "prometheus-client"]
    return found


def test_the_private_attributes_listed_here_are_the_ones_exposition_uses() -> None:
    code = "\n".join(line.split("#")[0] for line in EXPOSITION.read_text(encoding="utf-8").splitlines())
    used: dict[str, set[str]] = {}
    for receiver, attribute in re.findall(r"\b([a-z_]+)\._([a-z]\w*)", code):
        if receiver != "self":
            used.setdefault(receiver, set()).add("_" + attribute)
    assert used == PRIVATE


def test_the_installed_client_has_every_private_attribute_exposition_reads() -> None:
    registry = CollectorRegistry()
    parent = Gauge("onnxmon_probe", "probe", ["model"], registry=registry)
    child = parent.labels("m")
    child.set(1.0)
    plain = Counter("onnxmon_probe_plain", "probe", registry=registry)
    objects = {"registry": registry, "wrapper": parent, "child": child}
    missing = [f"{r}.{a}" for r, names in PRIVATE.items() for a in sorted(names) if not hasattr(objects[r], a)]
    assert missing == [], f"prometheus_client {version('prometheus-client')} lacks {missing}"
    # and they still mean what exposition.py takes them to mean
    assert parent in registry._collector_to_names and parent._is_parent() and not plain._is_parent()
    assert parent._labelnames == ("model",) and list(parent._metrics) == [("m",)]
    assert parent._get_metric().name == "onnxmon_probe"
    (sample,) = child._samples()
    assert (sample[0], sample[2], sample[3], sample[4]) == ("", 1.0, None, None)  # suffix, value, timestamp, exemplar
    assert Sample._fields[:5] == ("name", "labels", "value", "timestamp", "exemplar")


def test_pyproject_bounds_the_client_to_the_tested_minor_releases() -> None:
    requirement = the_requirement()
    assert any(s.operator == "<" for s in requirement.specifier), f"{requirement}: no upper bound"
    assert requirement.specifier.contains(Version(version("prometheus-client")))
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    locked = re.search(r"^prometheus-client==(\S+)", lock, re.MULTILINE)
    assert locked and requirement.specifier.contains(locked.group(1)), "requirements.lock is outside the bound"
