"""The knowledge base: shipped rules (valid, documented with sources), matching, incident signatures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monitor.diagnose import evidence
from monitor.errors import ConfigError
from monitor.knowledge import incidents, rules
from monitor.knowledge.rules import Facts
from monitor.results import CAUSE_CODES, CheckResult, Verdict

ROOT = Path(__file__).resolve().parent.parent


def test_the_rules_ship_as_package_data_and_name_known_causes() -> None:
    loaded = rules.load()
    assert len(loaded) >= 10
    assert {r.cause for r in loaded} <= CAUSE_CODES
    assert len({r.id for r in loaded}) == len(loaded)
    assert all(r.source.startswith("https://") for r in loaded)
    assert "knowledge/*.yaml" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_every_rule_is_listed_in_the_docs_with_its_source_and_nothing_else_is() -> None:
    text = (ROOT / "docs" / "knowledge.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, re.M)) - set(rules.CONDITIONS)
    assert listed == {r.id for r in rules.load()}
    for rule in rules.load():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{rule.id}` |"))
        assert f"({rule.source})" in row and f"`{rule.cause}`" in row


def test_the_issue_s_rules_are_all_there() -> None:
    by_cause = {r.id: r.cause for r in rules.load()}
    assert by_cause["tf32-gemm-ampere"] == by_cause["cudnn9-frontend-tf32"] == "tf32"
    assert by_cause["exhaustive-conv-search-varies"] == "conv_algorithm"
    assert by_cause["cpu-nchwc-layout"] == "graph_optimization"
    assert by_cause["fp16-layernorm-overflow"] == "model_precision_changed"
    assert by_cause["per-channel-downgraded"] == "model_quantized"
    assert by_cause["mlas-cpu-isa"] == "cpu_isa"
    assert by_cause["tree-ensemble-threads"] == "thread_count"
    assert by_cause["gpu-thermal-power-throttling"] == "gpu_throttling"
    assert by_cause["cudnn8-vs-9"] == "gpu_library_version"


def test_the_cause_codes_are_documented_once_each() -> None:
    text = (ROOT / "docs" / "diagnose.md").read_text(encoding="utf-8")
    section = text[text.index("## Cause codes") : text.index("## JSON")]
    assert set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, re.M)) == CAUSE_CODES


def _rule(*, cause: str = "tf32", match: str = "match: {reasons: [x]}", extra: str = "") -> str:
    return f"rules: [{{id: a, title: t, cause: {cause}, fix: f, source: s, {extra}{match}}}]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rules: 3", "expected a mapping with a 'rules' list"),
        (_rule(cause="tf33"), "cause 'tf33' is not one of"),
        (_rule(match="match: {colour: [x]}"), "unknown match conditions ['colour']"),
        (_rule(match="note: none"), "'match' is missing"),
        (_rule(match="match: {}"), "'match' must be a non-empty mapping"),
        (_rule(extra="weight: 7, "), "weight must be in (0, 1]"),
        (_rule(extra="sets: {registry: {a: [1]}}, "), "unknown 'sets' kinds ['registry']"),
    ],
)
def test_a_bad_rule_file_names_the_file_the_rule_and_the_field(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        rules.parse(text, where="my/rules.yaml")
    assert str(caught.value).startswith("my/rules.yaml") and expected in str(caught.value)


def _matched(facts: Facts) -> dict[str, float]:
    return {m.rule.id: m.weight for m in rules.match(rules.load(), facts)}


def test_a_tree_ensemble_rule_matches_the_localized_node_at_full_and_the_model_at_half_weight() -> None:
    localized = _matched(Facts(op_types=frozenset({"TreeEnsembleRegressor"})))
    in_model = _matched(Facts(model_op_types=frozenset({"TreeEnsembleRegressor", "Cast"})))
    assert localized["tree-ensemble-threads"] == pytest.approx(2 * in_model["tree-ensemble-threads"])
    assert "tree-ensemble-threads" not in _matched(
        Facts(op_types=frozenset({"Conv"}), model_op_types=frozenset({"TreeEnsembleRegressor"}))
    )


def test_a_rule_whose_fix_is_already_in_effect_is_not_offered() -> None:
    """tree-ensemble-threads says "1 thread"; with one intra-op thread configured its advice would be void."""
    trees = Facts(op_types=frozenset({"TreeEnsembleRegressor"}), session={"intra_op_num_threads": 2})
    assert "tree-ensemble-threads" in _matched(trees)
    single = Facts(**{**trees.__dict__, "session": {"intra_op_num_threads": 1}})
    assert "tree-ensemble-threads" not in _matched(single)
    assert [r.id for r in rules.in_effect(rules.load(), single)] == ["tree-ensemble-threads"]
    gemm = Facts(
        op_types=frozenset({"MatMul"}),
        providers=frozenset({"CUDAExecutionProvider"}),
        metrics=frozenset({"small_drift"}),
        provider_options={"use_tf32": "1"},
    )
    assert "tf32-gemm-ampere" in _matched(gemm)
    assert "tf32-gemm-ampere" not in _matched(Facts(**{**gemm.__dict__, "provider_options": {"use_tf32": "0"}}))


def test_cuda_rules_need_the_cuda_provider_in_use() -> None:
    conv = Facts(op_types=frozenset({"Conv"}), provider_options={"cudnn_conv_algo_search": "EXHAUSTIVE"})
    assert "exhaustive-conv-search-varies" not in _matched(conv)
    on_gpu = Facts(**{**conv.__dict__, "providers": frozenset({"CUDAExecutionProvider"})})
    assert "exhaustive-conv-search-varies" in _matched(on_gpu)


def test_environment_rules_match_changed_fields_and_current_values() -> None:
    cudnn = frozenset({"cuda.cudnn.version"})
    assert "cudnn8-vs-9" in _matched(Facts(env_changed=cudnn, providers=frozenset({"CUDAExecutionProvider"})))
    assert "cudnn8-vs-9" not in _matched(Facts(env_changed=cudnn, providers=frozenset({"CPUExecutionProvider"})))
    assert "mlas-cpu-isa" in _matched(Facts(env_changed=frozenset({"cpu.flags"})))
    hot = Facts(env={"gpu.0.clock_event_reasons": ["gpu_idle", "hw_thermal_slowdown"]})
    assert "gpu-thermal-power-throttling" in _matched(hot)
    assert "gpu-thermal-power-throttling" not in _matched(Facts(env={"gpu.0.clock_event_reasons": ["gpu_idle"]}))


def test_throttling_reported_by_nvml_becomes_evidence() -> None:
    run = CheckResult(
        "m",
        Verdict.FAIL,
        0.0,
        1.0,
        environment={
            "fields": {
                "gpu.0.clock_event_reasons": {"value": ["sw_thermal_slowdown"], "stable": False},
                "gpu.0.temperature_c": {"value": 91, "stable": False},
            }
        },
    )
    found = evidence.from_run(run)
    assert [h.cause for h in found] == ["gpu_throttling"]
    assert "91 °C" in found[0].evidence[0]


SIGNATURE = {
    "env_fields": ["cuda.cudnn.version"],
    "op_types": ["Conv"],
    "reasons": ["atol_rtol"],
    "outputs": ["logits"],
}


@pytest.mark.parametrize(
    ("other", "similar"),
    [
        (SIGNATURE, True),
        ({**SIGNATURE, "outputs": ["probs"]}, True),  # another output of the same kind of failure
        ({**SIGNATURE, "env_fields": ["onnxruntime.version"]}, False),  # another upgrade
        ({**SIGNATURE, "env_fields": [], "op_types": []}, False),
    ],
)
def test_incidents_match_by_signature(other: dict[str, list[str]], similar: bool) -> None:
    found = incidents.similar(SIGNATURE, [{"id": 1, "signature": other, "cause": "conv_algorithm"}])
    assert bool(found) is similar


def test_an_incident_noted_on_a_passing_run_is_similar_to_no_failure() -> None:
    # before: its empty signature matched a model swap at 0.6 ("similar to incident 1", cause runtime_version)
    passed = incidents.signature(reasons=[], env_diff=[], failing_outputs=[])
    swapped = incidents.signature(reasons=["model_changed"], env_diff=[], failing_outputs=["logits"])
    assert incidents.score(swapped, passed) == 0 and incidents.score(passed, swapped) == 0
    assert not incidents.similar(swapped, [{"id": 1, "signature": passed, "cause": "runtime_version"}])


def test_the_signature_of_a_run_uses_stable_env_changes_failing_outputs_and_reasons() -> None:
    run = {
        "reasons": [{"code": "model_changed"}],
        "outputs": [
            {"name": "a", "verdict": "fail", "reasons": [{"code": "atol_rtol"}]},
            {"name": "b", "verdict": "pass", "reasons": []},
        ],
        "details": {
            "env_diff": [{"field": "cpu.flags", "stable": True}, {"field": "host.load1", "stable": False}],
            "localization": {"first_changed": {"op_type": "Gemm"}, "first_out_of_tolerance": None},
        },
    }
    assert incidents.of_run(run) == {
        "env_fields": ["cpu.flags"],
        "op_types": ["Gemm"],
        "reasons": ["atol_rtol", "model_changed"],
        "outputs": ["a"],
    }
