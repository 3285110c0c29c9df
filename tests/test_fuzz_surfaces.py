"""The status pages and the CLI, fuzzed: any path, query, form or argument ends in an answer, never a crash.

``tests/test_fuzz.py`` drives the HTTP API from its OpenAPI document; the pages are left out of that
document (``include_in_schema=False``) and the CLI has none, so both are fuzzed here, over a real
store holding a pass, a fail and an error (``test_metrics.build_scenario``):

- every page route (``/``, ``/models/…``, ``/runs/…``, the Model Explorer JSON, ``/environments/…``,
  the environment diff's query, the incident form's POST) with any text in its path, query or form:
  a status below 500, no traceback or source path in the body, and text that arrived as markup
  (``<x-fuzz>``) never sent back as markup;
- the CLI's reading and noting commands (``history``, ``incident``, ``env diff``, ``baseline
  history``, ``history --since``) with hostile ids, names, causes and texts: an exit code
  of the documented set (0, 1, 2, 3), never an escaped exception or a traceback on either stream,
  and no ESC byte of the user's text on the terminal.

Budgets are small in the derandomized CI profile; the ``fuzz`` profile (``--hypothesis-profile fuzz``)
raises each to its 2000 examples.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import example, given
from hypothesis import strategies as st

from monitor.api.app import create_app
from monitor.cli import main
from monitor.sinks.database import DatabaseSink
from monitor.store import Store
from tests.test_fuzz import budget
from tests.test_metrics import RealDaemon, Scenario, build_scenario, migrated_store

MARKUP = "<x-fuzz>"
TRACE_MARKERS = ("Traceback (most recent call last)", 'File "/')

# Text as users and attackers send it: any code point (controls, NUL, lone surrogates are
# filtered by the transports below), non-ASCII digits, escape sequences and markup.
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(categories=["Nd"]), min_size=1, max_size=6),  # ١, ８ ...
    st.sampled_from(["0", "-1", "1e3", str(2**63), str(2**64), "..", "../../etc/passwd", "%00", "\x1b[2J", "2 ", " 2"]),
    st.text(max_size=20).map(lambda t: MARKUP + t),
)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    return build_scenario(tmp_path_factory)


@pytest.fixture(scope="module")
def client(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    for store in migrated_store(tmp_path_factory.mktemp("pages")):
        handle = RealDaemon(scenario.settings, store, startup_env=dict(scenario.passing.environment))
        for result in (scenario.passing, scenario.failing, scenario.no_baseline):
            handle.dispatch(result)
        with TestClient(create_app(handle), raise_server_exceptions=True) as test_client:
            yield test_client


def assert_answered(status: int, body: str, sent: str, content_type: str = "text/html") -> None:
    assert status < 500, f"{status} for {sent!r}: {body[:300]}"
    for marker in TRACE_MARKERS:
        assert marker not in body, f"{marker!r} in the answer to {sent!r}: {body[:300]}"
    if content_type.startswith("text/html"):  # JSON answers carry text as data (nosniff)
        assert MARKUP not in body, f"markup sent back unescaped in HTML for {sent!r}"


PAGE_PATHS = ("/models/{}", "/runs/{}", "/runs/{}/model-explorer.json", "/environments/{}")


@budget(60)
@given(template=st.sampled_from(PAGE_PATHS), text=hostile_text)
def test_any_page_path_is_answered_below_500(client: TestClient, template: str, text: str) -> None:
    path = template.format(quote(text.encode("utf-8", "surrogatepass"), safe=""))
    response = client.get(path)
    assert_answered(response.status_code, response.text, path, response.headers.get("content-type", ""))


@budget(40)
@given(a=st.none() | hostile_text, b=st.none() | hostile_text)
def test_any_environment_diff_query_is_answered_below_500(client: TestClient, a: str | None, b: str | None) -> None:
    params = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in (("a", a), ("b", b)) if v}
    response = client.get("/environments/diff", params=params)
    assert_answered(response.status_code, response.text, repr(params), response.headers.get("content-type", ""))


@budget(40)
@given(
    run_id=hostile_text,
    form=st.dictionaries(
        st.sampled_from(["cause", "text", "fix", "author", "csrf", "token"]), hostile_text, max_size=6
    ),
)
def test_any_incident_form_post_is_answered_below_500(client: TestClient, run_id: str, form: dict[str, str]) -> None:
    path = f"/runs/{quote(run_id.encode('utf-8', 'surrogatepass'), safe='')}/incidents"
    data = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in form.items()}
    response = client.post(path, data=data, follow_redirects=False)
    assert_answered(response.status_code, response.text, f"{path} {data!r}", response.headers.get("content-type", ""))


# --- the CLI -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config(scenario: Scenario) -> Path:
    """The scenario's config, its store holding the pass, the fail and the error."""
    config_file = scenario.ws.config_file
    assert main(["db", "upgrade", "-c", str(config_file)]) == 0
    with Store(scenario.settings.store.url) as store:
        sink = DatabaseSink(store)
        for result in (scenario.passing, scenario.failing, scenario.no_baseline):
            sink.write(result)
    return config_file


def commands(model: str, run_id: str, text: str, cause: str) -> list[list[str]]:
    return [
        ["history", model],
        ["history", model, "-o", "wide"],
        ["incident", "show", run_id],
        ["incident", "list", "--model", model],
        ["incident", "note", run_id, "--cause", cause, "--text", text, "--fix", text],
        ["env", "diff", text, run_id],
        ["baseline", "history", model],
        ["history", model, "--since", text],
    ]


@pytest.mark.slow
@budget(40)
@given(
    which=st.integers(min_value=0, max_value=7),
    model=st.one_of(st.sampled_from(["clf", "fresh"]), hostile_text),
    run_id=st.one_of(st.sampled_from(["1", "2", "3"]), hostile_text),
    text=hostile_text,
    cause=st.one_of(st.sampled_from(["tf32", "runtime_version"]), hostile_text),
)
@example(which=0, model="\x1b[2J", run_id="1", text="x", cause="tf32")  # the first escape it found: an error line
@example(which=2, model="clf", run_id="\x1b]0;pwned\x07", text="x", cause="tf32")  # and a usage error's
def test_any_cli_arguments_end_in_a_documented_exit_code(
    config: Path, capsys: pytest.CaptureFixture[str], which: int, model: str, run_id: str, text: str, cause: str
) -> None:
    clean = [
        a.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\0", "")
        for a in (model, run_id, text, cause)
    ]
    argv = [*commands(*clean)[which], "-c", str(config)]
    capsys.readouterr()
    code = main(argv)  # an exception escaping main() fails the test with its traceback
    captured = capsys.readouterr()
    both = captured.out + captured.err
    assert code in (0, 1, 2, 3), f"exit {code} for {argv!r}: {both[-500:]}"
    for marker in TRACE_MARKERS:
        assert marker not in both, f"{marker!r} for {argv!r}: {both[-500:]}"
    assert "\x1b" not in both, f"an ESC byte reached the terminal for {argv!r}"
