"""The pages' one Jinja2 environment: templates from ``templates/`` (package data), escaping on.

Autoescape is on for every template and undefined names raise (``StrictUndefined``), so a value
reaches HTML escaped unless it is ``Markup``. Exactly one function makes ``Markup`` from a string
built elsewhere: ``localize_plot``, the localization plot drawn by ``monitor.localize.plot`` (the
same SVG ``onnxmon localize`` writes to a file; it escapes its own text). Everything else a
page shows, its SVG charts included, is rendered by the templates from plain values.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from monitor.api.web import formats
from monitor.localize.plot import plot_svg
from monitor.localize.report import LocalizationReport

_ENV = Environment(
    loader=PackageLoader("monitor.api.web", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)
_ENV.filters.update(
    num=formats.num,
    duration=formats.duration,
    ago=formats.ago,
    stamp=formats.stamp,
    isotime=formats.isotime,
    px=lambda value: f"{value:.1f}",
)
_ENV.globals.update(url=formats.url, VERDICT_CLASSES=formats.VERDICT_CLASSES)


def render(template: str, **context: Any) -> str:
    """``template`` (a file under ``templates/``) rendered with ``context``."""
    return _ENV.get_template(template).render(**context)


def localize_plot(report: LocalizationReport) -> Markup:
    """The localization plot's SVG as markup: ``monitor.localize.plot.plot_svg`` escapes its own text."""
    return Markup(plot_svg(report))  # the one deliberate Markup of the pages (module docstring)
