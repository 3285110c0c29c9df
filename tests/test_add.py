"""``onnxmon add MODEL.onnx``: your own model monitored in one command, and ``config validate`` as strict as capture.

Before: monitoring a model took a hand-written benchmark set, a model entry and 2-3 commands found
by reading references, and ``config validate`` accepted a generated set with an unnamed dynamic
dimension that ``baseline capture`` then refused. Through the real console script on real models
(the committed corpus: a scikit-learn classifier whose batch axis has no name, a PyTorch CNN whose
has one), with real ONNX Runtime; the ground truth is plain ONNX Runtime on the same inputs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from monitor.cli import main
from monitor.config import settings
from monitor.errors import BenchsetError
from monitor.files import baselines, benchsets
from tests import modelzoo
from tests.stacks import child_env

ONNXMON = Path(sys.executable).parent / "onnxmon"
CORPUS = Path(__file__).resolve().parent / "corpus"
UNNAMED = CORPUS / "sklearn" / "logreg_nozipmap.onnx"  # input[?, 6]: the batch axis has no name
NAMED = CORPUS / "torch" / "cnn_dynamo.onnx"  # image[batch, 3, 32, 32]


def onnxmon(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ONNXMON), *args], cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=300)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    return lines[0]


def plain_ort_agrees(config: Path, model: str) -> int:
    """Every sample of the model's active baseline equals plain ONNX Runtime's outputs on the same inputs."""
    loaded = settings.load(config, environ={})
    entry = loaded.model(model)
    baseline = baselines.get(loaded.store.baselines_dir, baselines.active_id(loaded.store.baselines_dir, model) or "")
    bench = benchsets.open_benchset(loaded.store.benchsets_dir, entry.benchset)
    session = ort.InferenceSession(str(entry.path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    for index in range(len(bench)):
        expected = dict(zip(names, session.run(None, bench.load_sample(index)), strict=True))
        stored = baseline.sample_outputs(index)
        assert sorted(stored) == sorted(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(stored[name], value, err_msg=f"sample {index} output {name}")
    return len(bench)


@pytest.mark.process
def test_add_on_a_fresh_directory_asks_for_an_unnamed_axis_then_one_check_passes(tmp_path: Path) -> None:
    model = tmp_path / "classifier.onnx"
    model.write_bytes(UNNAMED.read_bytes())
    asked = onnxmon(tmp_path, "add", "classifier.onnx")
    assert asked.returncode == 2
    assert "pass --dim input:0=SIZE" in one_error_line(asked)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["classifier.onnx"], "a refused add wrote something"

    added = onnxmon(tmp_path, "add", "classifier.onnx", "--dim", "input:0=8")
    assert added.returncode == 0, added.stderr
    assert "next: onnxmon check classifier" in added.stdout
    assert onnxmon(tmp_path, "config", "validate").returncode == 0
    checked = onnxmon(tmp_path, "check", "classifier")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert plain_ort_agrees(tmp_path / "onnxmon.yaml", "classifier") == 13  # 8 random + 5 edge cases


@pytest.mark.process
def test_add_keeps_an_existing_configs_comments_refuses_a_taken_name_and_replaces_on_request(tmp_path: Path) -> None:
    (tmp_path / "cnn.onnx").write_bytes(NAMED.read_bytes())
    modelzoo.save(modelzoo.classifier(), tmp_path / "clf.onnx")
    original = (
        "# our monitor: do not lose this line\n"
        "store: {url: 'sqlite:///onnxmon.db', baselines_dir: baselines, benchsets_dir: benchsets}  # kept\n"
        "\n"
        "benchsets:\n"
        "  - name: clf-bench   # the classifier's inputs\n"
        "    generate: {model: clf.onnx, count: 2, dims: {batch: 2}}\n"
        "  # more sets go here\n"
        "\n"
        "models:\n"
        "  - name: clf\n"
        "    path: clf.onnx   # the production file\n"
        "    benchset: clf-bench\n"
        "# end of file comment\n"
    )
    config = tmp_path / "onnxmon.yaml"
    config.write_text(original, encoding="utf-8")

    added = onnxmon(tmp_path, "add", "cnn.onnx", "--count", "2")
    assert added.returncode == 0, added.stderr
    assert "dim 'batch' = 1 (a default" in added.stdout  # a named dynamic axis: its default size is said
    text = config.read_text(encoding="utf-8")
    remaining = iter(text.splitlines())
    assert all(line in remaining for line in original.splitlines()), text  # every line kept, in order
    assert [m.name for m in settings.load(config, environ={}).models] == ["clf", "cnn"]

    taken = onnxmon(tmp_path, "add", "cnn.onnx")
    assert taken.returncode == 2 and "--replace" in one_error_line(taken)
    assert config.read_text(encoding="utf-8") == text

    replaced = onnxmon(tmp_path, "add", "cnn.onnx", "--count", "2", "--dim", "batch=3", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    after = config.read_text(encoding="utf-8")
    assert "# our monitor: do not lose this line" in after and "# end of file comment" in after
    listed = baselines.list_baselines(tmp_path / "baselines", "cnn")
    assert len(listed) == 2 and baselines.active_id(tmp_path / "baselines", "cnn") == listed[-1].id
    assert listed[-1].meta.sample_count == 7
    assert onnxmon(tmp_path, "check", "cnn", "-q").returncode == 0  # clf: never captured here
    assert plain_ort_agrees(config, "cnn") == 7


def out_of_range_gather() -> onnx.ModelProto:
    """``y = table[ids]`` with a 3-row table: the generated ids (0..9) are out of its bounds, so ORT refuses."""
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")],
        "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [table],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.process
def test_a_failed_capture_leaves_the_config_as_it_was(tmp_path: Path) -> None:
    modelzoo.save(out_of_range_gather(), tmp_path / "lookup.onnx")
    failed = onnxmon(tmp_path, "add", "lookup.onnx")
    ours = [line for line in failed.stderr.splitlines() if line.startswith("onnxmon: error:")]  # ORT logs its own
    assert failed.returncode == 3 and "Traceback" not in failed.stderr and len(ours) == 1, failed.stderr
    assert "indices element out of data bounds" in ours[0] and "nothing was added to onnxmon.yaml" in ours[0]
    assert not (tmp_path / "onnxmon.yaml").exists()
    config = tmp_path / "mine.yaml"
    config.write_text("# mine\nstore: {url: 'sqlite:///m.db'}\n", encoding="utf-8")
    assert onnxmon(tmp_path, "add", "lookup.onnx", "-c", str(config)).returncode != 0
    assert config.read_text(encoding="utf-8") == "# mine\nstore: {url: 'sqlite:///m.db'}\n"
    # told the range, it works: the range is written into the set, and the next command names the config
    fixed = onnxmon(tmp_path, "add", "lookup.onnx", "--range", "ids=0,2", "-c", str(config))
    assert fixed.returncode == 0, fixed.stderr
    assert f"onnxmon check lookup -c {config}" in fixed.stdout
    assert plain_ort_agrees(config, "lookup") == 13


def test_config_validate_refuses_a_generated_set_that_capture_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The set names no size for the unnamed batch axis: validate said ok, capture then refused it."""
    model = tmp_path / "classifier.onnx"
    model.write_bytes(UNNAMED.read_bytes())
    data = {
        "store": {"url": "sqlite:///onnxmon.db", "baselines_dir": "baselines", "benchsets_dir": "benchsets"},
        "benchsets": [{"name": "b", "generate": {"model": "classifier.onnx", "count": 2}}],
        "models": [{"name": "m", "path": "classifier.onnx", "benchset": "b"}],
    }
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(BenchsetError) as refused:  # what capture runs first: materializing the set
        loaded = settings.load(config, environ={})
        benchsets.materialize(loaded.benchsets[0], loaded.store.benchsets_dir)
    assert main(["config", "validate", "-c", str(config)]) == 2
    err = capsys.readouterr().err
    assert "benchsets[0].generate: input 'input' axis 0 is dynamic and unnamed; set generate.dims['input:0']" in err
    assert str(refused.value).split(": ", 1)[1] in err  # the same words as capture's refusal

    data["benchsets"][0]["generate"]["dims"] = {"input:0": 4}
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["config", "validate", "-c", str(config)]) == 0


def test_config_validate_reports_a_generated_sets_problems_beside_a_schema_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cnn.onnx").write_bytes(NAMED.read_bytes())
    data = {
        "defaults": {"repeats": 0},
        "benchsets": [{"name": "b", "generate": {"model": "cnn.onnx", "ranges": {"pixels": [0, 1]}}}],
        "models": [{"name": "m", "path": "cnn.onnx", "benchset": "b"}],
    }
    config = tmp_path / "onnxmon.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["config", "validate", "-c", str(config)]) == 2
    err = capsys.readouterr().err
    assert "defaults.repeats" in err
    assert "benchsets[0].generate: generate.ranges names input(s) ['pixels']" in err
    assert "benchsets[0].generate: input 'image' has dynamic dim 'batch' (axis 0) with no value" in err


ENTRIES = {
    "benchsets": {"name": "n-bench", "generate": {"model": "n.onnx", "count": 2, "dims": {"batch": 1}}},
    "models": {"name": "n", "path": "n.onnx", "benchset": "n-bench"},
}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n",
        "models: []  # none yet\nbenchsets:\n",
        "benchsets: ~\nmodels: [{name: a, path: a.onnx, benchset: b}]  # flow\n",
        "models:\n- name: a\n  note: |\n    two\n    lines\n\n# about b\n- name: b\n  path: b.onnx\nbenchsets: []",
        "models:\n  - name: n   # replaced\n    path: old.onnx\n  - name: z\n    path: z.onnx  # kept\n",
        "models: [{name: n, path: old.onnx}, {name: z}]\n",
    ],
    ids=["empty", "comment", "empty-flow-and-null", "flow", "block-scalar", "replace-block", "replace-flow"],
)
def test_the_config_edit_adds_or_replaces_exactly_one_entry_per_list_and_keeps_comments(text: str) -> None:
    from monitor.config import edit

    result = edit.edited(text, ENTRIES, Path("onnxmon.yaml"))  # proven by parsing inside
    before = yaml.safe_load(text) or {}
    after = yaml.safe_load(result)
    for section, entry in ENTRIES.items():
        kept = [i for i in before.get(section) or [] if i.get("name") != entry["name"]]
        assert [i for i in after[section] if i.get("name") != entry["name"]] == kept
        assert [i for i in after[section] if i.get("name") == entry["name"]] == [entry]
    comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line and "replaced" not in line]
    assert all(c in result for c in comments), result


def test_the_config_edit_refuses_what_it_cannot_prove_and_shows_the_block_to_paste() -> None:
    from monitor.config import edit
    from monitor.errors import ConfigError

    shared = "base: &models\n  - name: a\nmodels: *models\nother: *models\n"  # an alias: editing one edits both
    with pytest.raises(ConfigError, match=r"add by hand:\nbenchsets:\n  - name: n-bench"):
        edit.edited(shared, ENTRIES, Path("onnxmon.yaml"))
    with pytest.raises(ConfigError, match="'models' is not a list"):
        edit.edited("models: {a: 1}\n", ENTRIES, Path("onnxmon.yaml"))


@pytest.mark.realmodels
@pytest.mark.process
@pytest.mark.parametrize(
    ("corpus_name", "dims"),
    [("surfaces-gbr", ["--dim", "input:0=16"]), ("voicefilter-embedder", []), ("vietcombank-captcha", [])],
)
def test_add_then_check_on_a_fetched_corpus_model(tmp_path: Path, corpus_name: str, dims: list[str]) -> None:
    """A model as its authors ship it: one ``add`` (the size of an unnamed axis given), then ``check`` passes."""
    from tests import realmodels

    source = realmodels.source_file(realmodels.MODELS[corpus_name])  # skips when the corpus is not fetched
    (tmp_path / "model.onnx").write_bytes(source.read_bytes())
    added = onnxmon(tmp_path, "add", "model.onnx", "--name", corpus_name, *dims, "-o", "json")
    assert added.returncode == 0, added.stderr
    document = yaml.safe_load(added.stdout)
    assert document["next"][0] == f"onnxmon check {corpus_name}" and document["baseline"]["active"] is True
    checked = onnxmon(tmp_path, "check", corpus_name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert plain_ort_agrees(tmp_path / "onnxmon.yaml", corpus_name) == 13


@pytest.mark.process
def test_the_your_model_walkthrough_runs_line_by_line(tmp_path: Path) -> None:
    """docs/your-model.md's walkthrough, from a copy of the corpus files it names; ``exit code N: TEXT`` is checked."""
    import re
    import shutil

    page = (Path(__file__).resolve().parents[1] / "docs" / "your-model.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", page[page.index("## Walkthrough") :], re.S)
    assert block is not None
    for name in ("sklearn/logreg_nozipmap.onnx", "torch/cnn_dynamo.onnx"):
        (tmp_path / "tests" / "corpus" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CORPUS / name, tmp_path / "tests" / "corpus" / name)
    script = ["set -u"]
    steps = 0
    for line in block.group(1).splitlines():
        command, _, comment = line.strip().partition("#")
        if not command.strip():
            continue
        expected = re.search(r"exit code (\d)(?::\s*(.+))?", comment)
        code, printed = (int(expected.group(1)), expected.group(2)) if expected else (0, None)
        command = re.sub(r"(\.\./)?\.venv/bin/", f"{ONNXMON.parent}/", command.strip())
        check = f'grep -qF -- "{printed.strip()}" "$T"' if printed else "true"
        script.append(
            f'T=$(mktemp); {{ {command}; }} >"$T" 2>&1; rc=$?; cat "$T"; '
            f'if [ $rc -ne {code} ] || ! {check}; then echo "STEP FAILED (rc $rc): {command}"; exit 99; fi'
        )
        steps += 1
    assert steps >= 8
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
