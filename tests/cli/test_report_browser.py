"""`memhook report`'s page drawn in a real headless browser (Chromium): the
page's script says every chart drew without an error, and a screenshot
holds what the charts paint - each library's stacked area, the OOM's mark
and the flame graph's bars - in their own colours.

Skipped only where no browser can be had (.ci/run installs Debian's
chromium; MEMHOOK_TEST_BROWSER names another)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from cli_testing import memhook
from report_testing import browser, decode_png, page_data, render, trace_oom, trace_ranks
from trace_files_testing import records, rewrite

# memhook/report/assets/report.js's colours, as the canvas paints them.
PALETTE = ["#5470c6", "#91cc75", "#fac858", "#ee6666"]
AREA_OPACITY = 0.85
OOM_MARK = (0xdd, 0x00, 0x00)
FLAME_CALL = (0xd9, 0x53, 0x4f)  # the allocating call's bars


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _on_white(rgb: tuple[int, int, int], alpha: float) -> tuple[int, ...]:
    return tuple(round(alpha * c + (1 - alpha) * 255) for c in rgb)


def _count(pixels: np.ndarray, rgb: tuple[int, ...], tolerance: int = 6) -> int:
    return int((np.abs(pixels.astype(np.int16) - np.array(rgb)).max(axis=2) <= tolerance).sum())


def _start(trace: Path) -> int:
    """The wall-clock time of a trace's first event."""
    rows = records(trace)
    first = next(r for r in rows if r["kind"] in ("alloc", "free"))
    clock = rows[0]["clock"]
    return first["ts_ns"] - clock["monotonic_ns"] + clock["realtime_ns"]


def _starting_with(model: Path, trace: Path) -> Path:
    """A copy of ``trace`` whose anchor puts its first event at ``model``'s."""
    clock = records(trace)[0]["clock"]
    moved = dict(clock, realtime_ns=clock["realtime_ns"] + _start(model) - _start(trace))
    return rewrite(trace, trace.with_name(f"aligned-{trace.name}"), {"clock": moved})


def test_the_page_draws_in_a_headless_browser(tmp_path: Path) -> None:
    exe = browser()
    if exe is None:
        pytest.skip("no browser: install chromium (Debian: apt-get install chromium), or "
                    "name one in MEMHOOK_TEST_BROWSER")
    oom = trace_oom(tmp_path / "oom.jsonl")
    # The three ran one after another; their anchors are moved so that they
    # start together, as three ranks of one job would, and each lane is drawn
    # across the chart rather than as a sliver of it.
    traces = [oom, *(_starting_with(oom, t) for t in trace_ranks(tmp_path))]
    page = tmp_path / "report.html"
    proc = memhook("report", *map(str, traces), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    data = page_data(page)
    assert len(data["lanes"]) == 3  # the OOM's process and two ranks

    shot = tmp_path / "report.png"
    dom = render(exe, page, shot, (1280, 2000))
    html = re.search(r"<html[^>]*>", dom)
    assert html, dom[:500]
    assert 'data-render="done"' in html.group(0), (html.group(0), dom[-3000:])
    assert f'data-charts="{len(data["lanes"]) + 1}"' in html.group(0), html.group(0)
    assert dom.count("<canvas") >= len(data["lanes"]) + 1

    pixels = decode_png(shot)
    assert pixels.shape[:2] == (2000, 1280)
    libraries = data["libraries"]
    for lib in {i for lane in data["lanes"] for i in lane["libs"]}:
        area = _count(pixels, _on_white(_rgb(PALETTE[lib % len(PALETTE)]), AREA_OPACITY))
        assert area > 2000, f"{libraries[lib]}'s stacked area: {area} pixels"
    assert _count(pixels, OOM_MARK, 10) > 100, "the OOM's mark line"
    assert _count(pixels, FLAME_CALL) > 2000, "the flame graph's bars"
