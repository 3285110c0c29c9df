"""The status pages' templates escape by default: no value reaches HTML as markup unless made so in one place.

The pages are Jinja2 templates over one environment (``monitor/api/web/templating.py``): autoescape
on, ``StrictUndefined``. These tests render a real template with markup in every value, ask for a
value that was not given, and read the sources: ``Markup`` is built only in ``templating.py`` and no
template turns escaping off (``|safe``, ``{% autoescape false %}``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import jinja2
import pytest

from monitor.api.web import templating

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "monitor" / "api" / "web"
HOSTILE = "<script>alert('x')</script>\"><img src=x onerror=alert(1)>"


def test_every_value_given_to_a_template_is_escaped_in_text_and_in_attributes() -> None:
    html = templating.render("error.html", title=HOSTILE, status=HOSTILE, message=HOSTILE, crumbs=[(HOSTILE, HOSTILE)])
    assert "<script" not in html and "<img" not in html
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&#34;&gt;&lt;img"
    assert html.count(escaped) == 6  # the title, the crumb's href and text, twice in the h1, the message
    assert 'href="&lt;script&gt;' in html, "an attribute value is escaped too, quotes included"


def test_a_value_the_template_was_not_given_is_an_error_not_an_empty_string() -> None:
    with pytest.raises(jinja2.UndefinedError):
        templating.render("error.html", title="t", status=404, crumbs=[])


def test_markup_is_made_from_a_string_in_one_place_only() -> None:
    makers = []
    for path in sorted((ROOT / "monitor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Markup":
                makers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(makers) == 1 and makers[0].startswith("monitor/api/web/templating.py:"), makers


@pytest.mark.parametrize("template", sorted(p.name for p in (WEB / "templates").iterdir()))
def test_no_template_turns_escaping_off_and_each_one_parses(template: str) -> None:
    source = (WEB / "templates" / template).read_text(encoding="utf-8")
    assert not re.search(r"\|\s*safe\b|autoescape\s+false|\bMarkup\b", source), template
    jinja2.Environment().parse(source)  # a syntax error fails here, even in a branch no page test reaches
