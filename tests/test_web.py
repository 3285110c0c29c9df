"""The status page through FastAPI's TestClient over a real handle: real checks, a real SQLite history.

The history holds a drift (a perturbed weight, localized by the daemon's own worker), an
environment change (a numeric env var, a stable field, set for one run), a baseline promotion,
and a run whose reason detail carries markup, to prove every page escapes what it shows.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
import pytest
from fastapi.testclient import TestClient

from monitor import capture
from monitor.api.app import create_app
from monitor.check import run_check
from monitor.config.plan import plan_for
from monitor.config.settings import Settings
from monitor.daemon import child
from monitor.results import AppliedTolerance, CheckResult, OutputMetrics, OutputStats, Reason, Verdict
from monitor.runtime import envsnap
from monitor.store import Store
from tests import modelzoo
from tests.test_metrics import RealDaemon, migrated_store
from tests.workspace import Workspace

HOSTILE = "<script>alert('x')</script>"
TF32 = "env.NVIDIA_TF32_OVERRIDE"


def with_tf32_override(snapshot: envsnap.EnvSnapshot) -> envsnap.EnvSnapshot:
    """The same machine with ``NVIDIA_TF32_OVERRIDE=0`` set: a stable field, so a new fingerprint."""
    data = snapshot.to_dict()
    data["fields"][TF32] = {"value": "0", "stable": True}
    return envsnap.EnvSnapshot.from_dict(data)


@dataclass(frozen=True)
class History:
    settings: Settings
    store_path: Path
    first_baseline: str
    promoted_baseline: str
    mlp_baseline: str
    env_before: str
    env_after: str
    drift_run: int
    env_change_run: int
    hostile_run: int


def _record(store: Store, baseline_dir: Path, meta: dict[str, object], active: bool) -> None:
    store.record_baseline(
        {
            "baseline_id": meta["id"],
            "model": meta["model"],
            "created_at": meta["created_at"],
            "source": meta["source"],
            "model_sha256": meta["model_sha256"],
            "environment": meta["environment"],
            "path": str(baseline_dir),
            "active": active,
        }
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    """clf: pass, pass in a changed environment, a promoted baseline, pass; mlp: pass, then a localized drift."""
    ws = Workspace(tmp_path_factory.mktemp("web"))
    mlp = modelzoo.deep_mlp(layers=6)
    ws.add_model("clf", modelzoo.classifier(), tolerance={"outputs": {"logits": {"atol": 1e-4, "rtol": 0.0}}})
    ws.add_model("mlp", mlp, localize_on_fail=True)
    settings = ws.settings()
    first = capture.capture_baseline(plan_for(settings, "clf"))
    mlp_base = capture.capture_baseline(plan_for(settings, "mlp"), intermediate_samples=1)
    store_dir = tmp_path_factory.mktemp("store")
    for store in migrated_store(store_dir):
        daemon = RealDaemon(settings, store)
        _record(store, first.directory, first.meta.to_dict(), active=True)
        _record(store, mlp_base.directory, mlp_base.meta.to_dict(), active=True)
        hostile = _hostile_result(time.time() - 600)
        daemon.dispatch(hostile)
        before = daemon.dispatch(run_check(plan_for(settings, "clf")))
        changed = daemon.dispatch(
            run_check(plan_for(settings, "clf"), capture_env=lambda: with_tf32_override(envsnap.capture()))
        )
        second = capture.capture_baseline(plan_for(settings, "clf"), note="after the environment change")
        daemon.promote(second.id, "alice")
        daemon.dispatch(run_check(plan_for(settings, "clf")))
        daemon.dispatch(run_check(plan_for(settings, "mlp")))
        ws.replace_model("mlp", modelzoo.perturb_initializer(mlp, "w2", 1.0, index=5))
        drifted = child.result_of(child.check_job(plan_for(settings, "mlp")))
        drifted = dataclasses.replace(drifted, environment=changed.environment)
        daemon.dispatch(drifted)
        assert drifted.verdict is Verdict.FAIL and "first_changed" in drifted.details["localization"]
        runs = {r.model: [x.id for x in store.runs(r.model)] for r in store.latest_per_model()}
        yield History(
            settings=settings,
            store_path=store_dir / "history.db",
            first_baseline=first.id,
            promoted_baseline=second.id,
            mlp_baseline=mlp_base.id,
            env_before=str(before.environment["fingerprint"]),
            env_after=str(changed.environment["fingerprint"]),
            drift_run=runs["mlp"][0],
            env_change_run=runs["clf"][1],
            hostile_run=runs["clf"][-1],
        )


def _hostile_result(at: float) -> CheckResult:
    """A hand-made failing run whose reason detail is markup and whose metrics are not finite."""
    metrics = OutputMetrics(element_count=4, max_abs_error=math.inf, snr_db=-math.inf, cosine_similarity=math.nan)
    output = OutputStats("prob", Verdict.FAIL, metrics, AppliedTolerance(atol=1e-5, rtol=1e-4), dtype="float32")
    return CheckResult(
        "clf",
        Verdict.FAIL,
        at,
        at + 1,
        outputs=(output,),
        reasons=(Reason("internal_error", HOSTILE),),
        attribution=HOSTILE,
    )


@pytest.fixture(scope="module")
def client(history: History) -> Iterator[TestClient]:
    with Store(f"sqlite:///{history.store_path}") as store:
        yield TestClient(create_app(RealDaemon(history.settings, store)), raise_server_exceptions=False)


def page(client: TestClient, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    return str(response.text)


def text_of(html: str) -> str:
    """The visible text, tags stripped and whitespace collapsed (enough for assertions)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_overview_lists_failing_models_first_with_their_baseline_and_environment(
    client: TestClient, history: History
) -> None:
    html = page(client, "/")
    assert html.index('href="/models/mlp"') < html.index('href="/models/clf"'), "failing models come first"
    rows = {m: html[html.index(f'href="/models/{m}"') :] for m in ("mlp", "clf")}
    assert 'class="badge bad">FAIL' in rows["mlp"] and 'class="badge ok">PASS' in rows["clf"]
    assert "matches baseline" in rows["clf"].split("</tr>")[0]
    assert "differs" in rows["mlp"].split("</tr>")[0], "the drifted run ran with NVIDIA_TF32_OVERRIDE set"
    assert history.promoted_baseline in rows["clf"] and history.mlp_baseline in rows["mlp"]
    assert html.count('class="spark"') == 2
    assert "1 failing" in text_of(html) and "1 passing" in text_of(html)
    changes = html[html.index("Recent changes") :]
    assert "baseline promoted" in changes and f'href="/environments/diff?a={history.env_before}' in changes


def test_a_failing_model_page_leads_with_its_failing_latest_run(client: TestClient, history: History) -> None:
    html = page(client, "/models/mlp")
    assert re.search(r"<h1>mlp <span class=\"badge bad\">FAIL</span></h1>", html)
    assert f"Outputs of run #{history.drift_run}" in html
    assert "≤ " not in html, "the comparison measures the exact worst error ÷ tolerance; no bound is shown"


def test_model_page_charts_history_with_environment_and_promotion_markers(client: TestClient, history: History) -> None:
    html = page(client, "/models/clf")
    chart = html[html.index('<svg class="chart"') : html.index("</svg>", html.index('<svg class="chart"'))]
    assert chart.count('<a href="/runs/') == 4, "every clf run is a point linking to its run"
    assert "environment: " + history.env_before in chart and "baseline promoted: " in chart
    assert ">tolerance</text>" in chart, "the line at 1 is the tolerance: the chart plots error_ratio"
    baselines = html[html.index('id="baselines"') :]
    assert baselines.index(history.promoted_baseline) < baselines.index(history.first_baseline), "newest first"
    assert "alice" in baselines and 'class="badge ok">active' in baselines
    assert f'href="/runs/{history.env_change_run}"' in html
    assert "logits" in html and "prob" in html, "the latest run's outputs are tabled"


def test_one_error_ratio_figure_on_every_page_and_in_the_api(client: TestClient, history: History) -> None:
    from monitor.api.web.formats import num

    run = client.get(f"/api/v1/runs/{history.drift_run}").json()
    ratios = [float(o["metrics"]["error_ratio"]) for o in run["outputs"]]
    assert float(run["error_ratio"]) == max(ratios) > 1, "the run's figure is its largest output error_ratio"
    shown = num(max(ratios))
    pages = {path: page(client, path) for path in ("/", "/models/mlp", f"/runs/{history.drift_run}")}
    for path, html in pages.items():
        assert "error ÷ tolerance" in html, path
        assert "÷ atol" not in html and "× atol" not in html and "÷ tol<" not in html, path
    assert shown in pages["/models/mlp"] and shown in pages[f"/runs/{history.drift_run}"]
    assert shown in pages["/"]


def test_run_page_shows_the_localized_drift_and_the_env_diff_against_the_baseline(
    client: TestClient, history: History
) -> None:
    html = page(client, f"/runs/{history.drift_run}")
    text = text_of(html)
    # ORT runs matmul_2, add_2 and tanh_2 as one FusedGemm: the answer is the fusion, mapped back.
    assert "First changed node: tanh_2 (Tanh, #8)" in text
    assert "First node out of tolerance: tanh_2 (Tanh, #8)" in text
    assert "which replaced matmul_2, add_2, tanh_2" in re.sub(r"\s+([,.])", r"\1", text)
    assert "this node introduced the change" in text
    assert "relative error per node" in html and "<circle" in html, "the per-node plot is inline"
    diff = html[html.index("Environment against the baseline") :]
    stable_rows = re.findall(r'<tr class="stable">(.*?)</tr>', diff)
    assert any(TF32 in row and "absent" in row and ">0<" in row for row in stable_rows)
    assert "model_changed" in text, "the worker attributes the drift to the changed model file"
    assert f'href="/models/mlp#baselines">{history.mlp_baseline}' in html


def test_run_page_links_the_localization_as_model_explorer_node_data(client: TestClient, history: History) -> None:
    html = page(client, f"/runs/{history.drift_run}")
    link = f"/runs/{history.drift_run}/model-explorer.json"
    assert f'href="{link}"' in html
    response = client.get(link)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    data = response.json()
    [(graph, node_data)] = data.items()
    assert graph == onnx.load(str(history.settings.model("mlp").path), load_external_data=False).graph.name
    # tanh_2 is where the drift starts (the first changed node): purple, apart from its downstream
    assert node_data["results"]["tanh_2"]["bgColor"] == "#9467bd"
    downstream = {v.get("bgColor") for k, v in node_data["results"].items() if k != "tanh_2"}
    assert "#9467bd" not in downstream and "#d62728" in downstream
    unlocalized = client.get(f"/runs/{history.hostile_run}/model-explorer.json")
    assert unlocalized.status_code == 200 and [g["results"] for g in unlocalized.json().values()] == [{}]
    assert client.get("/runs/999999/model-explorer.json").status_code == 404


def test_every_value_is_escaped_and_non_finite_numbers_read_as_symbols(client: TestClient, history: History) -> None:
    html = page(client, f"/runs/{history.hostile_run}")
    assert "<script" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html  # markupsafe's entities (Jinja2 autoescape)
    row = html[html.index('<span class="mono">prob</span>') :].split("</tr>")[0]
    assert "∞" in row and "−∞" in html and "NaN" in row and ">inf<" not in row
    assert "<script" not in page(client, "/models/clf")


def test_environment_page_groups_the_snapshot_and_marks_stable_fields(client: TestClient, history: History) -> None:
    html = page(client, f"/environments/{history.env_after[:10]}")
    assert history.env_after in html
    for heading in ("<h2>cpu</h2>", "<h2>env</h2>", "<h2>onnxruntime</h2>", "<h2>python</h2>"):
        assert heading in html
    tf32_row = re.search(rf'<tr class="stable">(?:(?!</tr>).)*{re.escape(TF32)}(?:(?!</tr>).)*</tr>', html)
    assert tf32_row is not None and "stable" in tf32_row.group(0)
    assert re.search(r'<tr class="volatile">(?:(?!</tr>).)*host\.name', html)


@pytest.mark.parametrize("by_baseline", [False, True])
def test_environment_diff_between_fingerprints_or_baseline_ids(
    client: TestClient, history: History, by_baseline: bool
) -> None:
    a = history.first_baseline if by_baseline else history.env_before[:8]
    html = page(client, f"/environments/diff?a={a}&b={history.env_after}")
    text = text_of(html)
    assert "NVIDIA_TF32_OVERRIDE none → 0" in text
    assert re.search(rf'<tr class="stable">(?:(?!</tr>).)*{re.escape(TF32)}', html)
    assert page(client, "/environments/diff").count("<form") == 1, "without a and b it is a form"


@pytest.mark.parametrize(
    "path",
    [
        "/models/nope",
        "/models/..%2Fetc",
        "/models/clf/extra",
        "/runs/1/2",
        "/models/%3Cscript%3E",
        "/runs/999999",
        "/runs/abc",
        "/runs/-1",
        "/runs/99999999999999999999999",
        "/environments/abcdef12",
        "/environments/xyz",
        "/environments/diff?a=nope&b=nothing",
    ],
)
def test_unknown_things_are_a_404_page_not_an_error(client: TestClient, path: str) -> None:
    html = page(client, path, status=404)
    assert "404" in html and "Traceback" not in html and "<script" not in html


def test_pages_load_nothing_from_elsewhere(client: TestClient, history: History) -> None:
    paths = ["/", "/models/clf", "/models/mlp", f"/runs/{history.drift_run}", f"/environments/{history.env_before}"]
    for path in paths:
        html = page(client, path)
        external = set(re.findall(r"https?://[^\s\"'<>)]+", html)) - {"http://www.w3.org/2000/svg"}
        assert not external, f"{path} refers to {external}"
        assert "<script" not in html and '<link rel="stylesheet"' not in html


def test_run_page_says_what_changed_in_the_model_file(client: TestClient, history: History) -> None:
    html = page(client, f"/runs/{history.drift_run}")
    section_html = html[html.index("What changed in the model file") :]
    text = text_of(section_html)
    assert "1 initializer changed values (float32)" in text
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", section_html) if ">w2<" in r)
    assert "matmul_2 (MatMul)" in row, row


def test_the_model_explorer_data_of_a_run_takes_only_ascii_digits_as_its_id(client: TestClient) -> None:
    # issue 30 B11 after issue 27's new route: /runs/١/model-explorer.json must not be run 1
    assert client.get("/runs/\u0661/model-explorer.json").status_code == 404
