"""An idle process costs nothing: after uninstall(), with no subscriber and
nothing pending, the memhook-feeder thread sleeps until there is work
(issue 33: it woke about 195 times a second, forever).  Counted from the
kernel's side: the thread's context switches (/proc/self/task/TID/status)
over a second.  It wakes again for an install, and drains then."""

from __future__ import annotations

from pathlib import Path

from hooks_api_testing import run_sim_script

from test_api_install import SETUP

BODY = """
import threading, time
from memhook._events import feeder as _feeder

def switches(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    return sum(int(v) for v in fields.values())

def wakeups_over(tid, seconds):
    before = switches(tid)
    time.sleep(seconds)
    return switches(tid) - before

init()
memhook.install("reloc")
assert _feeder.running()
tid = _feeder._thread.native_id
busy = wakeups_over(tid, 0.5)
p = alloc(4096)
memhook.flush()
memhook.uninstall()
free(p)                      # (not seen: no hooks)
time.sleep(0.3)              # its last poll ends
idle = wakeups_over(tid, 1.0)
print("installed, 0.5 s:", busy, "uninstalled, 1 s:", idle)
assert busy >= 20, busy      # (the poll this test watches for: 200 a second)
assert idle <= 3, f"the idle feeder woke {idle} times in a second"

# An install wakes it, and it drains a backlog nobody queries (down to
# the BACKLOG it leaves).
memhook.install("reloc")
seen = []
memhook.subscribe(seen.append)
ptrs = [alloc(4096) for _ in range(3000)]
want = 3000 - _feeder.BACKLOG
deadline = time.monotonic() + 30
while len(seen) < want and time.monotonic() < deadline:
    time.sleep(0.05)
assert len(seen) >= want, f"the feeder delivered {len(seen)} of 3000 events"
for q in ptrs:
    free(q)
memhook.uninstall()
print("ALL OK")
"""


def test_the_feeder_sleeps_after_uninstall(native, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = run_sim_script(native, tmp_path, setup=SETUP, body=BODY, timeout=120)
    print(out)
