"""`memhook report`'s page drawn in a real headless browser (Chromium): the
page's script says every chart drew without an error, and a screenshot
holds what the charts paint - each library's stacked area, the OOM's mark
and the flame graph's bars - in their own colours.

Skipped only where no browser can be had (.ci/run installs Debian's
chromium; MEMHOOK_TEST_BROWSER names another)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from cli_testing import memhook
from report_testing import browser, decode_png, page_data, render, trace_oom, trace_ranks
from trace_files_testing import records

# memhook/report/assets/report.js's colours, as the canvas paints them.
PALETTE = ["#5470c6", "#91cc75", "#fac858", "#ee6666"]
AREA_OPACITY = 0.85
OOM_MARK = (0xdd, 0x00, 0x00)
FLAME_CALL = (0xd9, 0x53, 0x4f)  # the allocating call's bars
SIZE = (1280, 1600)


@pytest.fixture(scope="module")
def exe() -> str:
    found = browser()
    if found is None:
        named = os.environ.get("MEMHOOK_TEST_BROWSER")
        pytest.skip(f"no browser: MEMHOOK_TEST_BROWSER={named} is not on PATH" if named else
                    "no browser: install chromium (Debian: apt-get install chromium), or "
                    "name one in MEMHOOK_TEST_BROWSER")
    return found


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _area(lib: int) -> tuple[int, ...]:
    """A library's stacked area: its colour at AREA_OPACITY over white."""
    return tuple(round(AREA_OPACITY * c + (1 - AREA_OPACITY) * 255)
                 for c in _rgb(PALETTE[lib % len(PALETTE)]))


def _count(pixels: np.ndarray, rgb: tuple[int, ...], tolerance: int = 6) -> int:
    return int((np.abs(pixels.astype(np.int16) - np.array(rgb)).max(axis=2) <= tolerance).sum())


def _evenly_spaced(trace: Path) -> Path:
    """A copy of ``trace`` with its events 1 ms apart, in their order (an
    ``oom`` record at the time of the failed call before it), its clock
    anchored at one fixed instant.  How long the simulator took between
    calls, and when each rank started, depend on the box's load; the
    charts' proportions, which the pixel counts below read, then do not."""
    rows = records(trace)
    rows[0]["clock"]["realtime_ns"] = 1_800_000_000 * 10**9  # every copy starts together
    step, at, out = 1_000_000, rows[0]["clock"]["monotonic_ns"], []
    for r in rows:
        if r["kind"] in ("alloc", "free"):
            at += step
            r["ts_ns"] = at
        elif r["kind"] == "oom":
            r["ts_ns"] = at
        out.append(json.dumps(r))
    spaced = trace.with_name(f"spaced-{trace.name}")
    spaced.write_text("\n".join(out) + "\n")
    return spaced


def _drawn(exe: str, traces: list[Path], tmp_path: Path, name: str) -> tuple[dict, str,
                                                                              np.ndarray]:
    """(the page's data, its DOM, its screenshot's pixels) of a report of ``traces``."""
    page = tmp_path / f"{name}.html"
    proc = memhook("report", *map(str, traces), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    data = page_data(page)
    shot = tmp_path / f"{name}.png"
    dom = render(exe, page, shot, SIZE)
    html = re.search(r'<html lang="en"[^>]*>', dom)
    assert html, dom[:500]
    # report.js: every chart said "finished", and nothing threw.
    assert 'data-render="done"' in html.group(0), (html.group(0), dom[-3000:])
    assert f'data-charts="{len(data["lanes"]) + 1}"' in html.group(0), html.group(0)
    pixels = decode_png(shot)
    assert pixels.shape[:2] == (SIZE[1], SIZE[0])
    return data, dom, pixels


def test_the_oom_page_draws_areas_the_mark_and_the_flame_graph(exe: str,
                                                               tmp_path: Path) -> None:
    data, dom, pixels = _drawn(exe, [_evenly_spaced(trace_oom(tmp_path / "oom.jsonl"))],
                               tmp_path, "oom")
    (lane,) = data["lanes"]
    assert len(lane["libs"]) == 2  # cuda-python's binding and libffi
    for lib in lane["libs"]:
        area = _count(pixels, _area(lib))
        assert area > 5000, f"{data['libraries'][lib]}'s stacked area: {area} pixels"
    assert _count(pixels, OOM_MARK, 10) > 100, "the OOM's mark line"
    assert _count(pixels, FLAME_CALL) > 2000, "the flame graph's bars"
    assert "cuMemAlloc_v2 of 16 MiB failed (CUDA_ERROR_OUT_OF_MEMORY)" in dom


def test_two_ranks_draw_a_lane_each(exe: str, tmp_path: Path) -> None:
    data, dom, pixels = _drawn(exe, [_evenly_spaced(t) for t in trace_ranks(tmp_path)],
                               tmp_path, "ranks")
    assert [lane["label"].split(" @ ")[0] for lane in data["lanes"]] == ["rank 0", "rank 1"]
    assert dom.count('class="lane"') == 2 and '<table id="peaks">' in dom
    (lib,) = {i for lane in data["lanes"] for i in lane["libs"]}
    assert _count(pixels, _area(lib)) > 2 * 20_000, "the ranks' stacked areas"
    assert _count(pixels, FLAME_CALL) > 2000, "the flame graph's bars"
