"""No private part of prometheus_client is read under ``monitor/``, so the client is not bounded above.

``/metrics`` is prometheus_client's own rendering (``choose_encoder``) of a registry of metric
wrappers and ``Collector`` s yielding metric families: its public API only. ``pyproject.toml``
therefore allows any later release, and this file proves, over the AST of every module under
``monitor/``, that none reads or writes an attribute whose name starts with ``_`` on:

* the client's modules and the names imported from them (``prometheus_client.registry._x``,
  ``CollectorRegistry._x``);
* the client's objects: a name or ``self`` attribute assigned from a call of an imported name,
  bound by a loop over one, or annotated with an imported type, and anything reached from one
  (``self.runs.labels("m")._value``); ``self`` in a subclass of an imported class, for the
  private names the client's own classes carry;
* any receiver at all, for the private names the installed client's classes and objects carry
  (``handle.registry._collector_to_names``: a registry that reached a module untyped).

namedtuple's public ``_replace`` family is allowed. Each rule is shown failing on a snippet.
"""

from __future__ import annotations

import ast
import inspect
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import prometheus_client
import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from prometheus_client import metrics, metrics_core, registry, samples

ROOT = Path(__file__).resolve().parents[1]
CLIENT = "prometheus_client"
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
# read by the hand-written exposition /metrics once had: private whatever a release calls them
ONCE_READ = {"_names_to_collectors", "_collector_to_names", "_metrics", "_samples", "_labelnames", "_lock",
             "_get_metric", "_is_parent", "_name"}  # fmt: skip


def client_private_names() -> frozenset[str]:
    """The ``_`` names of the installed client's modules, classes and objects (plus ``ONCE_READ``)."""
    names = set(ONCE_READ)
    for module in (prometheus_client, registry, metrics, metrics_core, samples, prometheus_client.exposition):
        for name, value in vars(module).items():
            names.add(name)
            if inspect.isclass(value) and value.__module__.startswith(CLIENT):
                names.update(dir(value))
    made = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter("onnxmon_probe", "probe", ["model"], registry=made)
    histogram = prometheus_client.Histogram("onnxmon_probe_seconds", "probe", registry=made)
    for thing in (made, counter, counter.labels("m"), histogram):
        names.update(vars(thing))
    return frozenset(n for n in names if n.startswith("_") and not n.startswith("__") and n not in NAMEDTUPLE_API)


PRIVATE = client_private_names()


def _dotted(node: ast.expr) -> str | None:
    """``name`` or ``self.name``: what an assignment can bind."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
        return f"{node.value.id}.{node.attr}"
    return None


class ClientReads:
    """The private attribute uses of prometheus_client in one module's AST, as ``(line, text)``."""

    def __init__(self, tree: ast.Module) -> None:
        self.roots: set[str] = set()  # names bound to the client's modules and what they export
        self.objects: set[str] = set()  # names and self attributes bound to the client's objects
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self.roots.update((a.asname or a.name).split(".")[0] for a in node.names if _client(a.name))
            elif isinstance(node, ast.ImportFrom) and node.module and _client(node.module):
                self.roots.update(a.asname or a.name for a in node.names)
        while True:  # the objects: flow-insensitive, to a fixed point (an object made from an object)
            before = len(self.objects)
            for node in ast.walk(tree):
                self._bind(node)
            if len(self.objects) == before:
                break
        self.found: list[tuple[int, str]] = []
        self._check(tree, subclass=False)

    def client(self, node: ast.expr) -> bool:
        """Whether ``node`` is (or is reached from) one of the client's modules, names or objects."""
        dotted = _dotted(node)
        if dotted is not None and (dotted in self.roots or dotted in self.objects):
            return True
        if isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
            return self.client(node.value)
        if isinstance(node, ast.Call):
            return self.client(node.func)
        if isinstance(node, ast.Await):
            return self.client(node.value)
        return False

    def _typed(self, annotation: ast.expr | None) -> bool:
        if annotation is None:
            return False
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a string annotation
            return bool(set(re.findall(r"\w+", annotation.value)) & self.roots)
        return any(isinstance(n, ast.Name) and n.id in self.roots for n in ast.walk(annotation))

    def _mark(self, target: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._mark(element)
        elif isinstance(target, ast.Starred):
            self._mark(target.value)
        elif (dotted := _dotted(target)) is not None:
            self.objects.add(dotted)

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign) and self.client(node.value):
            for target in node.targets:
                self._mark(target)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            value = node.value
            if (value is not None and self.client(value)) or self._typed(getattr(node, "annotation", None)):
                self._mark(node.target)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and self.client(node.iter):
            self._mark(node.target)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None and self.client(node.context_expr):
            self._mark(node.optional_vars)
        elif isinstance(node, ast.arg) and self._typed(node.annotation):
            self.objects.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and self._typed(node.returns):
            self.objects.add(node.name)  # a function returning a client object: its calls are ones

    def _check(self, node: ast.AST, *, subclass: bool) -> None:
        if isinstance(node, ast.ClassDef):
            subclass = any(self.client(base) for base in node.bases)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            receiver = node.value
            own = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
            if node.attr not in NAMEDTUPLE_API and (
                (self.client(receiver) and not own) or (node.attr in PRIVATE and (not own or subclass))
            ):
                self.found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            self._check(child, subclass=subclass)


def _client(module: str) -> bool:
    return module.split(".")[0] == CLIENT


def private_reads(source: str) -> list[str]:
    return [text for _, text in ClientReads(ast.parse(source)).found]


def test_no_module_under_monitor_reads_a_private_attribute_of_prometheus_client() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted((ROOT / "monitor").rglob("*.py"))
        for line, text in ClientReads(ast.parse(path.read_text(encoding="utf-8"), str(path))).found
    ]
    assert found == [], "private parts of prometheus_client read (its public API only):\n" + "\n".join(found)


def test_the_walk_sees_the_clients_objects_in_monitor() -> None:
    """Not vacuous: the modules that use the client have their registries and metrics tracked."""
    counters = ClientReads(ast.parse((ROOT / "monitor/sinks/prometheus/counters.py").read_text(encoding="utf-8")))
    assert {"Gauge", "CollectorRegistry"} <= counters.roots
    assert {"registry", "self.reload_ok", "self.registry"} <= counters.objects
    counts = ClientReads(ast.parse((ROOT / "monitor/sinks/prometheus/model_counts.py").read_text(encoding="utf-8")))
    assert {"CounterMetricFamily", "HistogramMetricFamily", "Collector", "Sample"} <= counts.roots
    collector = ClientReads(ast.parse((ROOT / "monitor/sinks/prometheus/collector.py").read_text(encoding="utf-8")))
    assert {"prometheus_client", "GaugeMetricFamily", "Collector"} <= collector.roots
    assert {"_collector_to_names", "_metrics", "_samples", "_lock"} <= PRIVATE


@pytest.mark.parametrize(
    "source",
    [
        "import prometheus_client\nprometheus_client.registry._lock",
        "import prometheus_client.registry as r\nr._x",
        "from prometheus_client import registry\nregistry.REGISTRY._names_to_collectors",
        "from prometheus_client import CollectorRegistry\nreg = CollectorRegistry()\nlist(reg._collector_to_names)",
        "from prometheus_client import CollectorRegistry\ndef f(r: CollectorRegistry):\n    return r._anything_new",
        "from prometheus_client import CollectorRegistry\ndef f(r: 'CollectorRegistry | None'):\n    return r._x",
        "from prometheus_client import Counter\nclass M:\n    def __init__(self):\n"
        "        self.runs = Counter('a', 'b', ['m'])\n    def f(self):\n        return self.runs._metrics",
        "from prometheus_client import Counter\nc = Counter('a', 'b', ['m'])\nc.labels('x')._value.get()",
        "from prometheus_client import CollectorRegistry\nr = CollectorRegistry()\nfor m in r.collect():\n    m._x",
        "from prometheus_client.metrics import MetricWrapperBase\nclass W(MetricWrapperBase):\n"
        "    def f(self):\n        return self._labelnames",
        "def render(handle):\n    return handle.registry._collector_to_names",  # untyped: a name the client keeps
        "from prometheus_client import Counter\nc = Counter('a', 'b')\nc._private_of_a_future_release",
    ],
)
def test_a_private_read_is_found(source: str) -> None:
    assert private_reads(source), f"not found in:\n{source}"


@pytest.mark.parametrize(
    "source",
    [
        "class Mine:\n    def f(self):\n        return self._lock, self._metrics",  # our own object's privates
        "from prometheus_client.registry import Collector\nclass C(Collector):\n"
        "    def f(self):\n        return self._mine",  # a collector's own attributes
        "import urllib.parse\nurllib.parse.urlsplit('x')._replace(query='')",
        "from prometheus_client.samples import Sample\nSample('a', {}, 1.0)._replace(value=2.0)",
        "def f(store):\n    return store._session()",  # a private name the client does not have
    ],
)
def test_what_is_not_the_clients_private_part_is_not_found(source: str) -> None:
    assert private_reads(source) == []


def the_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (found,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "prometheus-client"]
    return found


def test_pyproject_leaves_the_client_unbounded_above_and_admits_the_installed_and_locked_ones() -> None:
    requirement = the_requirement()
    assert not any(s.operator in ("<", "<=", "==", "~=") for s in requirement.specifier), f"{requirement}: bounded"
    assert requirement.specifier.contains(Version(version("prometheus-client")))
    lock = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    locked = re.search(r"^prometheus-client==(\S+)", lock, re.MULTILINE)
    assert locked and requirement.specifier.contains(locked.group(1)), "requirements.lock is outside the requirement"
