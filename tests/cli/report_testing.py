"""Helpers of the tests of `memhook report`: the traces it is tried on, the
data a page holds, and a headless browser to draw a page in.

Imported as ``from report_testing import ...``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

from cli_testing import HERE, memhook
from trace_files_testing import finished, trace_sites

__all__ = ["OOM_PROGRAM", "browser", "decode_png", "page_data", "render", "trace_oom",
           "trace_ranks"]

OOM_PROGRAM = HERE / "scripts" / "oom_fill.py"
_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def trace_oom(out: Path) -> Path:
    """tests/cli/scripts/oom_fill.py (a 32 MiB device filled from two libraries,
    then a 16 MiB request that fails) traced to ``out`` as jsonl, --python --stacks."""
    env = dict(os.environ, MEMHOOK_SIM_DEVICE_MEMORY="32M", MEMHOOK_SIM_DEVICES="1")
    proc = memhook("trace", "--sim", "--python", "--stacks", "-f", "jsonl", "-o", str(out),
                   "--", sys.executable, str(OOM_PROGRAM), "exit", env=env)
    assert proc.returncode == 0 and "failed 2" in proc.stdout, proc.stderr
    return out


def trace_ranks(where: Path, ranks: int = 2) -> list[Path]:
    """alloc_sites.py traced as ``ranks`` ranks at once (RANK set, as a launcher
    would), to ``where/t-%r.jsonl``; rank 1 leaks."""
    procs = [trace_sites("t-%r.jsonl", *(["leak"] if rank == 1 else []), cwd=where,
                         env=dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks)))
             for rank in range(ranks)]
    for proc in procs:
        finished(proc)
    return [where / f"t-{rank}.jsonl" for rank in range(ranks)]


def page_data(page: Path) -> dict:
    """The JSON a page draws (its #report-data script)."""
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                  page.read_text(), re.S)
    assert m, f"{page} holds no report data"
    return json.loads(m.group(1))


def browser() -> str | None:
    """A headless-capable Chromium, or None (``MEMHOOK_TEST_BROWSER`` names one)."""
    named = os.environ.get("MEMHOOK_TEST_BROWSER")
    if named:
        return shutil.which(named)
    for name in _BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def render(exe: str, page: Path, screenshot: Path, size: tuple[int, int]) -> str:
    """Open ``page`` in headless ``exe`` once: its DOM after the scripts ran
    (the ``<html>`` tag and what follows), and a screenshot of ``size`` to
    ``screenshot``."""
    with tempfile.TemporaryDirectory(prefix="memhook-browser-") as profile:
        proc = subprocess.run(
            [exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--hide-scrollbars",
             "--virtual-time-budget=10000", f"--window-size={size[0]},{size[1]}",
             "--dump-dom", f"--screenshot={screenshot}", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0 and screenshot.exists(), proc.stderr[-2000:]
    return proc.stdout


def decode_png(path: Path) -> np.ndarray:
    """The pixels (height x width x RGB) of an 8-bit RGB or RGBA PNG, as
    headless Chromium writes them (PIL is not in the test environment)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    at, chunks, header = 8, [], None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        chunk = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            chunks.append(chunk)
        at += 12 + length
    assert header is not None, f"{path} has no IHDR"
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    stride = width * bpp
    raw = np.frombuffer(zlib.decompress(b"".join(chunks)), np.uint8).reshape(height, stride + 1)
    out = np.empty((height, stride), np.uint8)
    prev = np.zeros(stride, np.int64)
    for y in range(height):
        kind, line = int(raw[y, 0]), raw[y, 1:].astype(np.int64)
        if kind == 0:
            cur = line
        elif kind == 1:  # Sub: each byte plus the one bpp before, decoded: a running sum
            cur = np.cumsum(line.reshape(width, bpp), axis=0).reshape(stride) & 255
        elif kind == 2:  # Up
            cur = (line + prev) & 255
        else:  # Average, Paeth: each byte needs its decoded left neighbour
            b, up, dec = line.tolist(), prev.tolist(), [0] * stride
            for i in range(stride):
                left = dec[i - bpp] if i >= bpp else 0
                if kind == 3:
                    dec[i] = (b[i] + (left + up[i]) // 2) & 255
                    continue
                corner = up[i - bpp] if i >= bpp else 0
                p = left + up[i] - corner
                pa, pb, pc = abs(p - left), abs(p - up[i]), abs(p - corner)
                dec[i] = (b[i] + (left if pa <= pb and pa <= pc else up[i] if pb <= pc
                                  else corner)) & 255
            cur = np.array(dec, np.int64)
        out[y] = cur
        prev = cur
    return out.reshape(height, width, bpp)[:, :, :3]
