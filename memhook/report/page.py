"""``memhook report``'s page: one HTML file that holds everything it shows
- the data as JSON, the charting library (Apache ECharts, vendored in
``assets/``, see its README) and the page's own script - so it opens from
a disk, a mail or a CI artifact with no network."""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any, Protocol

from .._version import __version__

__all__ = ["ASSETS", "TextSink", "render_page"]

ASSETS = ("echarts.min.js", "report.js")
"""The scripts the page inlines, in order, from memhook/report/assets/."""

_STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 24px 40px;
       color: #1f2328; background: #fff; }
h1 { font-size: 20px; margin: 18px 0 4px; }
h2 { font-size: 16px; margin: 26px 0 6px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 13px; font-weight: 600; margin: 12px 0 2px; }
.muted, #summary { color: #57606a; }
#peaks { margin-bottom: 8px; }
#flame { min-height: 120px; }
.lane.oom h3 { color: #b00; }
.oom-card { border-left: 4px solid #b00; padding: 2px 12px 8px; margin: 10px 0;
            background: #fff6f6; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { padding: 2px 10px; text-align: left; border-bottom: 1px solid #eee; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#error { background: #fdd; color: #900; padding: 8px 12px; font-weight: 600; }
#notes { color: #9a6700; }
.empty { color: #57606a; font-style: italic; }
"""

_BODY = """<h1>{title}</h1>
<div id="error" hidden></div>
<p id="summary"></p>
<ul id="notes" hidden></ul>
<h2>Live device memory over time, by calling library</h2>
<p class="muted">One lane per rank and device; drag or scroll on a chart to zoom (the lanes
zoom together). Each point is the highest total of its interval, so no peak is lost.</p>
<div id="lanes"></div>
<div id="oom-section" hidden><h2>Out of memory</h2><div id="ooms"></div></div>
<h2 id="flames">Largest call paths</h2>
<p class="muted">Python frames (orange), then native frames (blue), then the allocating call
(red); a bar's width is its bytes. Click a bar to zoom into it.
<label>View: <select id="flame-view"></select></label>
<label>Highlight: <input id="flame-search" type="search"
placeholder="a function, file or library"></label>
<span id="flame-total"></span></p>
<div id="flame" class="chart"></div>
<p class="muted">Made by memhook {version} with Apache ECharts (Apache License 2.0).</p>
"""


class TextSink(Protocol):
    """Where the page goes: anything with a text ``write``."""

    def write(self, text: str, /) -> Any: ...


def _script(text: str) -> str:
    # The HTML parser ends a script at "</script", whatever the JS means by it.
    return text.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def render_page(out: TextSink, data: dict) -> None:
    """Write the page for ``data`` (:meth:`memhook.report.model.ReportModel.page_data`)."""
    assets = resources.files(__package__).joinpath("assets")
    title = html.escape(str(data.get("title") or "memhook report"))
    # In JSON "<" only occurs inside strings, where \\u003c means the same.
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    out.write('<!DOCTYPE html>\n<html lang="en" data-render="pending">\n<head>\n'
              '<meta charset="utf-8">\n'
              '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
              "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
              "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
              f"<title>{title}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n")
    out.write(_BODY.format(title=title, version=html.escape(__version__)))
    out.write(f'<script type="application/json" id="report-data">{payload}</script>\n')
    for name in ASSETS:
        text: Any = assets.joinpath(name).read_text(encoding="utf-8")
        out.write(f"<script>/* {name} */\n{_script(text)}\n</script>\n")
    out.write("</body>\n</html>\n")
