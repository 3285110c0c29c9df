"""The built-in rules of the knowledge base: YAML data shipped in the package, matched against facts.

``rules.yaml`` (beside this module, package data) lists what the field knows about numeric drift
in ONNX Runtime deployments, each rule with its cause code, the fix to try and its source
(docs/knowledge.md). ``load()`` validates the file once (a rule with an unknown cause or an unknown
condition is a ``ConfigError`` naming the file, the rule and the field); ``match(rules, facts)``
returns the rules whose every condition holds for one failing run's ``Facts``.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from monitor.errors import ConfigError
from monitor.results import CAUSE_CODES

RULES_FILE = "rules.yaml"
CONDITIONS = frozenset(
    {
        "env_changed",
        "env_value",
        "op_types",
        "reasons",
        "providers",
        "provider_options",
        "session",
        "metrics",
        "knobs_fixed",
        "model_change",
    }
)


@dataclass(frozen=True)
class Facts:
    """What is known about one failing run, in the terms the rules match on."""

    env_changed: frozenset[str] = frozenset()  # stable fields that differ from the baseline's
    env: Mapping[str, Any] = field(default_factory=dict)  # the current environment, field -> value
    op_types: frozenset[str] = frozenset()  # op types at the localized node(s)
    model_op_types: frozenset[str] = frozenset()  # every op type of the model (used without a localization)
    reasons: frozenset[str] = frozenset()
    providers: frozenset[str] = frozenset()  # effective
    provider_options: Mapping[str, str] = field(default_factory=dict)  # merged over the providers in use
    session: Mapping[str, Any] = field(default_factory=dict)
    metrics: frozenset[str] = frozenset()
    knobs_fixed: frozenset[str] = frozenset()
    model_change: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    cause: str
    confidence: float
    fix: str
    source: str
    match: Mapping[str, Any]


@dataclass(frozen=True)
class RuleMatch:
    """A rule that holds; ``localized`` is False when its op types matched the whole model only."""

    rule: Rule
    confidence: float
    localized: bool


@functools.cache
def load() -> tuple[Rule, ...]:
    """The built-in rules (read once per process)."""
    text = resources.files("monitor.knowledge").joinpath(RULES_FILE).read_text(encoding="utf-8")
    return parse(text, where=str(Path("monitor/knowledge") / RULES_FILE))


def parse(text: str, *, where: str) -> tuple[Rule, ...]:
    """Rules from YAML text; ``ConfigError`` naming ``where``, the rule and the field on any mistake."""
    data = yaml.safe_load(text)
    if not isinstance(data, Mapping) or not isinstance(data.get("rules"), list):
        raise ConfigError(f"{where}: expected a mapping with a 'rules' list")
    found = []
    for index, raw in enumerate(data["rules"]):
        label = f"{where}: rules[{index}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{label}: expected a mapping, got {type(raw).__name__}")
        for key in ("id", "title", "cause", "fix", "source", "match"):
            if key not in raw:
                raise ConfigError(f"{label}: '{key}' is missing")
        if raw["cause"] not in CAUSE_CODES:
            raise ConfigError(f"{label} ({raw['id']}): cause {raw['cause']!r} is not one of {sorted(CAUSE_CODES)}")
        conditions = raw["match"]
        if not isinstance(conditions, Mapping) or not conditions:
            raise ConfigError(f"{label} ({raw['id']}): 'match' must be a non-empty mapping")
        unknown = sorted(set(conditions) - CONDITIONS)
        if unknown:
            raise ConfigError(f"{label} ({raw['id']}): unknown match conditions {unknown}; known: {sorted(CONDITIONS)}")
        confidence = float(raw.get("confidence", 0.5))
        if not 0.0 < confidence <= 1.0:
            raise ConfigError(f"{label} ({raw['id']}): confidence must be in (0, 1], got {confidence}")
        found.append(
            Rule(
                str(raw["id"]),
                str(raw["title"]),
                str(raw["cause"]),
                confidence,
                str(raw["fix"]),
                str(raw["source"]),
                dict(conditions),
            )
        )
    return tuple(found)


def match(rules: Iterable[Rule], facts: Facts) -> list[RuleMatch]:
    """The rules whose every condition holds, most confident first."""
    found = []
    for rule in rules:
        localized = _holds(rule.match, facts)
        if localized is not None:
            confidence = rule.confidence if localized else rule.confidence / 2
            found.append(RuleMatch(rule, confidence, localized))
    return sorted(found, key=lambda m: -m.confidence)


def _holds(conditions: Mapping[str, Any], facts: Facts) -> bool | None:
    """None when a condition fails; else whether op types matched at the localized node (True) or the model."""
    localized = True
    for name, wanted in conditions.items():
        if name == "op_types":
            if facts.op_types:
                if not _any_in(wanted, facts.op_types):
                    return None
            elif _any_in(wanted, facts.model_op_types):
                localized = False
            else:
                return None
        elif name == "env_changed":
            if not any(fnmatch.fnmatchcase(f, pattern) for f in facts.env_changed for pattern in _list(wanted)):
                return None
        elif name == "env_value":
            if not all(_value_matches(facts.env, key, values) for key, values in dict(wanted).items()):
                return None
        elif name in ("provider_options", "session"):
            have = facts.provider_options if name == "provider_options" else facts.session
            if not all(
                _text(have.get(key)) in [_text(v) for v in _list(values)] for key, values in dict(wanted).items()
            ):
                return None
        elif name == "knobs_fixed":
            if not any(fnmatch.fnmatchcase(k, pattern) for k in facts.knobs_fixed for pattern in _list(wanted)):
                return None
        elif not _any_in(wanted, getattr(facts, name)):
            return None
    return localized


def _value_matches(env: Mapping[str, Any], key: str, patterns: Any) -> bool:
    for name, value in env.items():
        if not fnmatch.fnmatchcase(name, key):
            continue
        values = value if isinstance(value, list) else [value]
        if any(fnmatch.fnmatchcase(str(v), str(p)) for v in values for p in _list(patterns)):
            return True
    return False


def _any_in(wanted: Any, have: Iterable[str]) -> bool:
    return bool(set(map(str, _list(wanted))) & set(have))


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return "" if value is None else str(value)
