"""The status page's building blocks: escaping, number and time formatting, badges, tables, the page shell.

Every value that reaches HTML passes through ``esc`` (model names, reasons and environment
values are config or user data). Pages are plain server-rendered HTML with inline CSS and
inline SVG: no scripts, no fonts, nothing fetched from elsewhere, so they work air-gapped and
under the strict ``CONTENT_SECURITY_POLICY`` the routes send.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape

from monitor.api.web.formats import CONTENT_SECURITY_POLICY, VERDICT_CLASSES, ago, duration, num, url, utc

__all__ = ["CONTENT_SECURITY_POLICY", "ago", "duration", "num", "url", "utc"]

# A tiny inline icon, so the browser never asks for /favicon.ico (a 404 is a console error).
_FAVICON = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Ccircle cx='8' cy='8' r='7' fill='%232563eb'/%3E%3C/svg%3E"
)


def esc(value: object) -> str:
    """``value`` as HTML text (quotes escaped too, so it is safe inside attributes)."""
    return escape(str(value), quote=True)


def link(href: str, text: object, *, title: str | None = None) -> str:
    hint = f' title="{esc(title)}"' if title else ""
    return f'<a href="{esc(href)}"{hint}>{esc(text)}</a>'


def when(moment: datetime | None, now: datetime) -> str:
    """A ``<time>`` showing the UTC time, with the relative age beside it."""
    if moment is None:
        return '<span class="muted">—</span>'
    moment = utc(moment)
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f'<time datetime="{esc(moment.isoformat())}" title="{esc(stamp)} UTC">{esc(stamp)}</time>'
        f' <span class="muted">({esc(ago(moment, now))})</span>'
    )


def badge(text: object, kind: str, *, title: str | None = None) -> str:
    """A coloured pill; ``kind`` is one of ok, bad, warn, info, none."""
    hint = f' title="{esc(title)}"' if title else ""
    return f'<span class="badge {esc(kind)}"{hint}>{esc(text)}</span>'


def verdict_badge(verdict: str | None) -> str:
    if verdict is None:
        return badge("no runs", "none")
    return badge(verdict.upper(), VERDICT_CLASSES.get(verdict, "none"))


def fingerprint_link(fingerprint: str | None) -> str:
    if not fingerprint:
        return '<span class="muted">—</span>'
    href = url("environments", fingerprint)
    return f'<a class="mono" href="{esc(href)}" title="{esc(fingerprint)}">{esc(fingerprint[:12])}</a>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, css: str = "", empty: str = "nothing yet") -> str:
    """A table of already-rendered cells; ``headers`` are escaped here. ``empty`` shows when there are no rows."""
    body = ["<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows]
    if not body:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f'<table class="{esc(css)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def facts(items: Iterable[tuple[str, str]]) -> str:
    """A definition list of (label, rendered value) pairs."""
    return '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items) + "</dl>"


def section(title: str, body: str, *, anchor: str | None = None) -> str:
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return f'<section class="card"{ident}><h2>{esc(title)}</h2>{body}</section>'


def page(title: str, body: str, *, crumbs: Sequence[tuple[str, str | None]] = (), refresh_s: int | None = None) -> str:
    """The whole document: head, navigation bar, breadcrumbs (``(text, href or None)``) and ``body``."""
    trail = " <span class='sep'>/</span> ".join(
        link(href, text) if href else f"<span>{esc(text)}</span>" for text, href in crumbs
    )
    refresh = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{refresh}<title>{esc(title)} · onnxmon</title>
<link rel="icon" href="{_FAVICON}">
<style>{_CSS}</style>
</head>
<body>
<header class="top"><a class="brand" href="/">onnxmon</a>
<nav><a href="/">Models</a><a href="/environments/diff">Compare environments</a>
<a href="/api/v1/models">API</a><a href="/metrics">Metrics</a></nav></header>
<main>
<div class="crumbs">{trail}</div>
{body}
</main>
<footer>onnxmon · precision monitor for ONNX Runtime · times are UTC</footer>
</body>
</html>
"""


_CSS = """
:root { --fg:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f6f7f9; --card:#fff; --accent:#2563eb;
  --ok:#15803d; --ok-bg:#dcfce7; --bad:#b91c1c; --bad-bg:#fee2e2; --warn:#b45309; --warn-bg:#fef3c7;
  --info:#1d4ed8; --info-bg:#dbeafe; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--fg); background: var(--bg); }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
header.top { display:flex; align-items:center; gap:24px; padding:10px 24px; background:#111827; }
header.top .brand { color:#fff; font-weight:700; font-size:16px; letter-spacing:.3px; }
header.top nav a { color:#d1d5db; margin-right:16px; } header.top nav a:hover { color:#fff; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 32px; }
footer { text-align:center; color: var(--muted); font-size:12px; padding: 0 0 24px; }
.crumbs { color: var(--muted); margin: 4px 0 12px; } .crumbs .sep { margin: 0 4px; }
h1 { font-size: 22px; margin: 0 0 4px; display:flex; align-items:center; gap:10px; flex-wrap:wrap; }
h2 { font-size: 15px; margin: 0 0 10px; color:#111827; }
.sub { color: var(--muted); margin: 0 0 16px; }
.card { background: var(--card); border:1px solid var(--line); border-radius:8px; padding:14px 16px; margin: 0 0 16px;
  overflow-x:auto; }
table { border-collapse: collapse; width:100%; }
th { text-align:left; font-weight:600; color: var(--muted); font-size:12px; text-transform:uppercase;
  letter-spacing:.4px; border-bottom:1px solid var(--line); padding:6px 8px; white-space:nowrap; }
td { border-bottom:1px solid var(--line); padding:6px 8px; vertical-align:top; }
tbody tr:hover { background:#f9fafb; } tbody tr:last-child td { border-bottom:none; }
td.num, .num { text-align:right; font-variant-numeric: tabular-nums; }
table.metrics td:not(:first-child) { text-align:right; font-variant-numeric: tabular-nums; }
.mono, code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
.muted { color: var(--muted); } strong.over { color: var(--bad); }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600;
  line-height:18px; white-space:nowrap; border:1px solid transparent; }
.badge.ok { color: var(--ok); background: var(--ok-bg); } .badge.bad { color: var(--bad); background: var(--bad-bg); }
.badge.warn { color: var(--warn); background: var(--warn-bg); }
.badge.info { color: var(--info); background: var(--info-bg); }
.badge.none { color: var(--muted); background:#f3f4f6; }
dl.facts { display:grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin:0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin:0; word-break: break-word; }
.grid { display:grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap:16px; }
.grid > .card { margin:0; } .grid { margin-bottom:16px; }
table.env { table-layout: fixed; } table.env th:first-child { width: 34%; }
table.env th:last-child { width: 110px; } table.env td { word-break: break-word; }
tr.stable td { background: #fff7ed; } tr.stable td:first-child { box-shadow: inset 3px 0 0 #f97316; }
td.old { color: #9f1239; } td.new { color: #166534; }
ul.reasons { margin:0; padding-left: 18px; } ul.reasons li { margin: 2px 0; }
.reason-code { font-weight:600; }
.chart { display:block; max-width:100%; height:auto; }
.legend { display:flex; gap:16px; flex-wrap:wrap; color: var(--muted); font-size:12px; margin-top:6px; }
.legend i { display:inline-block; width:14px; height:3px; margin-right:5px; vertical-align:middle; }
.callout { border-left: 4px solid var(--bad); background: var(--bad-bg); padding: 8px 12px; border-radius: 4px;
  margin-bottom: 10px; }
.callout.ok { border-color: var(--ok); background: var(--ok-bg); }
.callout.warn { border-color: var(--warn); background: var(--warn-bg); }
form.inline { display:flex; gap:8px; align-items:center; flex-wrap:wrap; }
form.inline input { padding:5px 8px; border:1px solid var(--line); border-radius:6px; min-width: 260px;
  font: inherit; }
form.inline button { padding:5px 12px; border:1px solid var(--accent); background: var(--accent); color:#fff;
  border-radius:6px; font: inherit; cursor:pointer; }
.empty { text-align:center; padding: 48px 0; color: var(--muted); }
.empty h1 { justify-content:center; color: var(--fg); }
details summary { cursor:pointer; color: var(--accent); margin: 6px 0; }
"""
