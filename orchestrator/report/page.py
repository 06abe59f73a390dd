"""The report's document: its blocks rendered as Markdown (report.md, bias-table.md, the terminal's table) and as
one self-contained HTML page (report.html), by Jinja2 from the templates beside this module (report.md.jinja,
report.html.jinja, shipped as package data).

Blocks (orchestrator/report/paper.py `document`, orchestrator/claims/table.py, missing.py, ...): ("h", level,
text), ("p", text), ("table", headers, rows), ("img", file name, caption). HTML escapes every text (Jinja2's
autoescape). The Markdown escapes a table cell's "|" and nothing else, as before: Jinja2 has no Markdown escaping,
so that one replace is the `cell` filter here.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path

import jinja2

_HERE = Path(__file__).resolve().parent


def _environment(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_HERE), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["cell"] = lambda value: str(value).replace("|", "\\|")
    return env


_MARKDOWN = _environment(autoescape=False).get_template("report.md.jinja")
_HTML = _environment(autoescape=True).get_template("report.html.jinja")


def render_markdown(blocks: Sequence[tuple]) -> str:
    return _MARKDOWN.render(blocks=blocks)


def render_html(blocks: Sequence[tuple], images: Mapping[str, bytes], title: str) -> str:
    """The same blocks as one page, every image embedded as a base64 data URI (the page travels alone)."""
    encoded = {name: base64.b64encode(data).decode("ascii") for name, data in images.items()}
    return _HTML.render(blocks=blocks, images=encoded, title=title)
