"""The built-in rules of the knowledge base: YAML data shipped in the package, matched against facts.

``rules.yaml`` (beside this module, package data) lists what the field knows about numeric drift
in ONNX Runtime deployments, each rule with its cause code, the fix to try and its source
(docs/knowledge.md). ``load()`` validates the file once (a rule with an unknown cause or an unknown
condition is a ``ConfigError`` naming the file, the rule and the field); ``match(rules, facts)``
returns the rules whose every condition holds for one failing run's ``Facts``, except a rule whose
fix is already in effect (its ``sets``: the settings its fix would make): advice to set what is
set would be void (``in_effect`` lists those, for the diagnosis' notes).

A rule's ``weight`` orders its evidence among the other evidence (halved when its op types match
the model but not the localized node). It is not a probability: nothing measured it, and no
surface shows it.
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
SETTINGS = frozenset({"session", "provider_options", "env"})


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
    weight: float
    fix: str
    source: str
    match: Mapping[str, Any]
    sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # {session|provider_options|env: {key: [v]}}


@dataclass(frozen=True)
class RuleMatch:
    """A rule that holds; ``localized`` is False when its op types matched the whole model only."""

    rule: Rule
    weight: float
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
        weight = float(raw.get("weight", 0.5))
        if not 0.0 < weight <= 1.0:
            raise ConfigError(f"{label} ({raw['id']}): weight must be in (0, 1], got {weight}")
        sets = raw.get("sets") or {}
        if not isinstance(sets, Mapping) or not all(isinstance(v, Mapping) for v in sets.values()):
            raise ConfigError(f"{label} ({raw['id']}): 'sets' must map {sorted(SETTINGS)} to {{key: [values]}}")
        if set(sets) - SETTINGS:
            raise ConfigError(f"{label} ({raw['id']}): unknown 'sets' kinds {sorted(set(sets) - SETTINGS)}")
        found.append(
            Rule(
                str(raw["id"]),
                str(raw["title"]),
                str(raw["cause"]),
                weight,
                str(raw["fix"]),
                str(raw["source"]),
                dict(conditions),
                {str(k): dict(v) for k, v in sets.items()},
            )
        )
    return tuple(found)


def match(rules: Iterable[Rule], facts: Facts) -> list[RuleMatch]:
    """The rules whose every condition holds and whose fix is not already in effect, heaviest first."""
    found = []
    for rule in rules:
        localized = _holds(rule.match, facts)
        if localized is not None and not _in_effect(rule, facts):
            weight = rule.weight if localized else rule.weight / 2
            found.append(RuleMatch(rule, weight, localized))
    return sorted(found, key=lambda m: -m.weight)


def in_effect(rules: Iterable[Rule], facts: Facts) -> list[Rule]:
    """The rules whose conditions hold but whose fix is already in effect (so ``match`` leaves them out)."""
    return [rule for rule in rules if _holds(rule.match, facts) is not None and _in_effect(rule, facts)]


def _in_effect(rule: Rule, facts: Facts) -> bool:
    """Whether every setting the rule's fix makes already has one of its values in production."""
    if not rule.sets:
        return False
    have = {"session": facts.session, "provider_options": facts.provider_options, "env": facts.env}
    return all(
        _text(have[kind].get(key)) in [_text(v) for v in _list(values)]
        for kind, settings in rule.sets.items()
        for key, values in settings.items()
    )


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
