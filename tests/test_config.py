"""The config file: every mistake is reported at start-up with its path, env overrides nest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.cli import main
from monitor.config import settings
from monitor.errors import ConfigError

MINIMAL: dict[str, Any] = {
    "benchsets": [{"name": "b", "generate": {"model": "m.onnx", "count": 2}}],
    "models": [{"name": "m", "path": "m.onnx", "benchset": "b"}],
}


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "onnxmon.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def problems(tmp_path: Path, data: Any, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as raised:
        settings.load(write(tmp_path, data), environ=environ or {})
    return str(raised.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90.0), ("90", 90.0), ("30s", 30.0), ("15m", 900.0), ("1h", 3600.0), ("7d", 604800.0), ("250ms", 0.25)],
)
def test_durations_read_as_seconds(text: Any, seconds: float) -> None:
    assert settings.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["-5s", "soon", "15 minutes", True, "1.5.2m"])
def test_nonsense_durations_are_refused(text: Any) -> None:
    with pytest.raises(ValueError):
        settings.parse_duration(text)


def models(*extra: dict[str, Any]) -> dict[str, Any]:
    """``{"models": [...]}`` with model ``m`` (path m.onnx, benchset b) updated by each ``extra``."""
    return {"models": [{"name": "m", "path": "m.onnx", "benchset": "b"} | e for e in extra]}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (models({"tolerance": {"outputs": {"logits": {"atol": -1}}}}),
         "models[0].tolerance.outputs.logits.atol: must be >= 0"),
        (models({"benchset": "nope"}), "uses benchset 'nope', which is not declared"),
        (models({"repeats": 0}), "models[0].repeats: must be >= 1"),
        (models({"tolerence": {}}), "models[0].tolerence: unknown key"),
        (models({"providers": []}), "list at least one execution provider"),
        (models({"providers": ["CUDA"]}), "models[0].providers[0].name"),
        (models({"schedule": {"interval": "1m"}, "timeout": "5m"}),
         "timeout 300s must be shorter than its schedule interval 60s"),
        ({"defaults": {"schedule": {"cron": "*/61 * * * *"}}}, "cron '*/61 * * * *' is invalid"),
        ({"defaults": {"schedule": {"interval": "1m", "cron": "* * * * *"}}}, "exactly one of 'interval' or 'cron'"),
        ({"benchsets": [{"name": "b"}]}, "set exactly one source"),
        (models({}, {"path": "x.onnx"}), "model name 'm' is used twice"),
        ({"api": {"port": 70000}}, "api.port: must be <= 65535"),
    ],
)  # fmt: skip
def test_every_config_mistake_is_reported_with_its_path(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    assert expected in problems(tmp_path, MINIMAL | change)


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    bad = MINIMAL | {
        "defaults": {"repeats": 0},
        "models": [{"name": "m", "path": "m.onnx", "benchset": "b", "tolerance": {"default": {"rtol": -1}}}],
    }
    message = problems(tmp_path, bad)
    assert "2 problem(s)" in message
    assert "defaults.repeats" in message and "models[0].tolerance.default.rtol" in message


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    message = problems(tmp_path, "models: [\n  {name: m,\n")
    assert "onnxmon.yaml" in message and "line" in message and "not valid YAML" in message


def test_a_missing_config_file_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not found .*-c PATH or set ONNXMON_CONFIG"):
        settings.load(tmp_path / "absent.yaml", environ={})


def test_env_overrides_nest_with_double_underscores_and_index_lists(tmp_path: Path) -> None:
    environ = {
        "ONNXMON_STORE__URL": "postgresql+psycopg://db/onnxmon",
        "ONNXMON_MODELS__0__REPEATS": "3",
        "ONNXMON_MODELS__0__TOLERANCE__DEFAULT__ATOL": "1e-3",
        "ONNXMON_DAEMON__AUTO_CAPTURE_BASELINE": "true",
        "UNRELATED": "x",
    }
    loaded = settings.load(write(tmp_path, MINIMAL), environ=environ)
    assert loaded.store.url == "postgresql+psycopg://db/onnxmon"
    assert loaded.models[0].repeats == 3
    assert loaded.tolerance_for(loaded.models[0], "any").atol == 1e-3
    assert loaded.daemon.auto_capture_baseline is True


def test_store_migrate_off_unquoted_in_yaml_or_the_environment_means_off(tmp_path: Path) -> None:
    """YAML 1.1 reads ``off`` as false: ``store.migrate: off``, as documented, was refused ("should be 'off'")."""
    text = "store:\n  migrate: off\n" + yaml.safe_dump(MINIMAL)
    assert settings.load(write(tmp_path, text), environ={}).store.migrate == "off"
    environ = {"ONNXMON_STORE__MIGRATE": "off"}
    assert settings.load(write(tmp_path, MINIMAL), environ=environ).store.migrate == "off"
    assert settings.load(write(tmp_path, MINIMAL), environ={"ONNXMON_STORE__MIGRATE": "auto"}).store.migrate == "auto"


def test_an_env_override_into_a_missing_list_item_is_a_clear_error(tmp_path: Path) -> None:
    message = problems(tmp_path, MINIMAL, {"ONNXMON_MODELS__5__REPEATS": "2"})
    assert "ONNXMON_MODELS__5__REPEATS" in message and "not an index" in message


@pytest.mark.parametrize(
    ("variable", "text", "read"),
    [
        ("ONNXMON_API__TOKEN", "0123", lambda s: s.api.token),  # YAML would read the octal-looking 83
        ("ONNXMON_API__TOKEN", "yes", lambda s: s.api.token),  # YAML 1.1 would read True
        ("ONNXMON_API__TOKEN", "null", lambda s: s.api.token),  # YAML would unset it
        ("ONNXMON_API__TOKEN", "1e3", lambda s: s.api.token),
        ("ONNXMON_STORE__URL", "sqlite:////tmp/x.db", lambda s: s.store.url),
        ("ONNXMON_MODELS__0__NAME", "007", lambda s: s.models[0].name),
    ],
)
def test_an_env_override_of_a_string_field_is_the_text_as_written(
    tmp_path: Path, variable: str, text: str, read: Any
) -> None:
    loaded = settings.load(write(tmp_path, MINIMAL), environ={variable: text})
    assert read(loaded) == text


def test_an_env_override_of_a_non_string_field_still_reads_yaml(tmp_path: Path) -> None:
    environ = {
        "ONNXMON_MODELS__0__PROVIDERS": "[CPUExecutionProvider]",
        "ONNXMON_DAEMON__AUTO_CAPTURE_BASELINE": "yes",
        "ONNXMON_DEFAULTS__SCHEDULE__INTERVAL": "15m",
    }
    loaded = settings.load(write(tmp_path, MINIMAL), environ=environ)
    assert [p.name for p in loaded.models[0].providers] == ["CPUExecutionProvider"]
    assert loaded.daemon.auto_capture_baseline is True
    assert loaded.defaults.schedule.interval == 900


def test_a_misspelt_env_override_is_named_in_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    environ = {"ONNXMON_STORE_URL": "sqlite:////tmp/elsewhere.db", "ONNXMON_NODE_NAME": "n1", "ONNXMON_CONFIG": "x"}
    with caplog.at_level("WARNING", logger="monitor.config.settings"):
        loaded = settings.load(write(tmp_path, MINIMAL), environ=environ)
    assert loaded.store.url != "sqlite:////tmp/elsewhere.db"
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "environment variable ONNXMON_STORE_URL is not a setting and is ignored; did you mean ONNXMON_STORE__URL?"
    ]


def test_an_env_override_that_names_no_nested_field_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    message = problems(tmp_path, MINIMAL, {"ONNXMON_DAEMON__STARTUP_SPRAED": "1"})
    assert "env ONNXMON_DAEMON__STARTUP_SPRAED: daemon has no setting 'startup_spraed'" in message
    assert "did you mean 'startup_spread'?" in message


def test_relative_paths_resolve_against_the_config_file_not_the_working_directory(
    tmp_path: Path, workdir: Path
) -> None:
    nested = tmp_path / "conf"
    nested.mkdir()
    loaded = settings.load(write(nested, MINIMAL), environ={})
    assert loaded.models[0].path == nested / "m.onnx"
    assert loaded.store.baselines_dir == nested / "baselines"
    assert loaded.store.url == f"sqlite:///{nested / 'onnxmon.db'}"


@pytest.mark.parametrize(
    ("default", "model", "output", "expected"),
    [
        ({"atol": 1e-5, "rtol": 1e-4}, {}, {}, (1e-5, 1e-4, None)),
        ({"atol": 1e-5, "rtol": 1e-4}, {"atol": 1e-3}, {}, (1e-3, 1e-4, None)),
        ({"atol": 1e-5, "rtol": 1e-4}, {"atol": 1e-3}, {"rtol": 0.0, "cosine_min": 0.999}, (1e-3, 0.0, 0.999)),
    ],
)
def test_tolerances_inherit_field_by_field(
    tmp_path: Path, default: dict[str, Any], model: dict[str, Any], output: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    data = MINIMAL | {
        "defaults": {"tolerance": default},
        "models": [
            {"name": "m", "path": "m.onnx", "benchset": "b", "tolerance": {"default": model, "outputs": {"y": output}}}
        ],
    }
    loaded = settings.load(write(tmp_path, data), environ={})
    applied = loaded.tolerance_for(loaded.models[0], "y")
    assert (applied.atol, applied.rtol, applied.cosine_min) == expected


def test_config_validate_prints_every_problem_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, MINIMAL | {"defaults": {"repeats": 0}})
    assert main(["config", "validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnxmon: error: ") and "defaults.repeats: must be >= 1" in err
    assert "Traceback" not in err


def test_config_validate_accepts_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[1]
    assert main(["config", "validate", "-c", str(root / "onnxmon.yaml")]) == 0
    assert "ok (1 model(s), 1 benchset(s))" in capsys.readouterr().out


def _workspace_with_typo(tmp_path: Path) -> Path:
    """Two models: one with a tolerance for an output it lacks (``logitz``), one whose file is gone."""
    from tests import modelzoo
    from tests.workspace import Workspace

    ws = Workspace(tmp_path)
    ws.add_model("clf", modelzoo.classifier(), tolerance={"outputs": {"logitz": {"atol": 1e-3}, "prob": {}}})
    ws.add_model("gone", modelzoo.classifier())
    (tmp_path / "models" / "gone.onnx").unlink()
    return ws.write()


def test_config_validate_reports_unknown_outputs_and_missing_model_files_in_one_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _workspace_with_typo(tmp_path)
    assert main(["config", "validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "3 problem(s)" in err, err  # the generated set of the missing model too: capture would refuse it
    assert f"benchsets[1].generate: model file {tmp_path / 'models' / 'gone.onnx'} not found" in err
    assert "models[0].tolerance.outputs.logitz: 'logitz' is not an output of clf.onnx;" in err
    assert "outputs are ['logits', 'prob']" in err and "outputs.prob" not in err
    assert f"models[1].path: model file {tmp_path / 'models' / 'gone.onnx'} does not exist" in err
    assert main(["config", "validate", "-c", str(path), "-o", "json"]) == 2
    document = yaml.safe_load(capsys.readouterr().out)
    assert document["ok"] is False and len(document["problems"]) == 3


def test_schema_errors_keep_their_paths_beside_the_missing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(_workspace_with_typo(tmp_path).read_text(encoding="utf-8"))
    data["models"][0]["repeats"] = 0
    data["models"].append(dict(data["models"][1]))
    data["defaults"] = {"schedule": {"interval": "1s"}, "timeout": "5s"}
    path = write(tmp_path, data)
    assert main(["config", "validate", "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "models[0].repeats: must be >= 1" in err
    assert "models: name 'gone' is used twice" in err
    assert "models[1].path: model file" in err and "models[2].path: model file" in err


@pytest.mark.parametrize(
    "other_problem",
    ["schema error", "undeclared benchset", "name used twice"],
)
def test_an_unknown_output_is_reported_beside_a_problem_that_stops_the_config_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], other_problem: str
) -> None:
    # before: any of these hid the typo `logitz` (and the decision on `probz`) from the report
    data = yaml.safe_load(_workspace_with_typo(tmp_path).read_text(encoding="utf-8"))
    data["models"][0]["decisions"] = {"probz": {"kind": "argmax"}}
    expected = {
        "schema error": "models[1].repeats: must be >= 1",
        "undeclared benchset": "model 'third' uses benchset 'nobench', which is not declared",
        "name used twice": "model name 'gone' is used twice",
    }[other_problem]
    if other_problem == "schema error":
        data["models"][1]["repeats"] = 0
    elif other_problem == "undeclared benchset":
        data["models"].append(data["models"][0] | {"name": "third", "benchset": "nobench", "tolerance": {}})
        data["models"][-1].pop("decisions")
    else:
        data["models"].append(dict(data["models"][1]))
    assert main(["config", "validate", "-c", str(write(tmp_path, data))]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert "models[0].tolerance.outputs.logitz: 'logitz' is not an output of clf.onnx;" in err, err
    assert "models[0].decisions.probz: 'probz' is not an output of clf.onnx;" in err, err
    assert "models[1].path: model file" in err
    assert err.count("is used twice") == (1 if other_problem == "name used twice" else 0), err


def test_every_cross_reference_problem_is_reported_at_once(tmp_path: Path) -> None:
    data = {
        "benchsets": [MINIMAL["benchsets"][0], MINIMAL["benchsets"][0]],
        "models": [MINIMAL["models"][0], MINIMAL["models"][0] | {"timeout": "2h"}],
    }
    found = problems(tmp_path, data)
    assert "model name 'm' is used twice" in found and "benchset name 'b' is used twice" in found
    assert "must be shorter than its schedule interval" in found


@pytest.mark.parametrize("command", [["check", "clf", "--no-store"], ["baseline", "capture", "clf"]])
def test_check_and_capture_refuse_a_tolerance_for_an_output_the_model_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    path = _workspace_with_typo(tmp_path)
    assert main([*command, "-c", str(path)]) == 2
    err = capsys.readouterr().err
    assert "models[0].tolerance.outputs.logitz: 'logitz' is not an output of clf.onnx" in err, err
    assert "Traceback" not in err and not (tmp_path / "baselines" / "clf").exists()


def test_a_config_setting_the_removed_rehash_every_fails_naming_it_and_what_to_do(tmp_path: Path) -> None:
    said = problems(tmp_path, {**MINIMAL, "daemon": {"rehash_every": 100}})
    assert "daemon" in said and "rehash_every was removed" in said and "delete it" in said, said
    loaded = settings.load(write(tmp_path, {**MINIMAL, "daemon": {"warm_workers": 4}}), environ={})
    assert loaded.daemon.warm_workers == 4
