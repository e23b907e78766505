"""memhook's hooks on a real GPU: every case of tests/gpu/hooks_on_gpu.py in
every mode (bistro, reloc, bistro+reloc, bistro with the 12-byte jump
forced), each in a fresh subprocess (hooks installed in the pytest process
would leak into every later test).  The junit shows one test per (case, mode).

    . tools/gpu/device_setup.sh && python3 -m pytest -m gpu tests/gpu
    bash tools/gpu-run.sh            # the whole suite + census + figures, one device call

Set HOOKS_ON_GPU_RESULTS=FILE to also append each case's full result (every
check, the events per function, install time) to FILE as JSON lines.
"""

from __future__ import annotations

import json
import os

import hooks_on_gpu as H
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", list(H.MODES))
@pytest.mark.parametrize("case", H.CASES)
def test_hooks_on_gpu(case: str, mode: str) -> None:
    res = H.run_case(mode, case, timeout=float(os.environ.get("HOOKS_ON_GPU_TIMEOUT", "240")),
                     sim=False)
    out = os.environ.get("HOOKS_ON_GPU_RESULTS")
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps(res) + "\n")
    strict = [ch for ch in res.get("checks", []) if ch["strict"]]
    print(H.line_of(res))
    assert res["status"] == "OK", H.line_of(res)
    assert strict, "no check ran"
