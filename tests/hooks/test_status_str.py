"""print(memhook.status()) is a table for people; repr stays the dataclass's."""

from __future__ import annotations

import dataclasses

import memhook
from memhook import EventKind, HookMode
from memhook.hooks import HookInfo, HookReport, QueueStats


def _report() -> HookReport:
    queue = QueueStats(produced=7, consumed=5, segments_live=1, segments_peak=2,
                       segment_bytes=4096, free_size_from_driver=0, free_size_unknown=0, lanes=3)
    hooks = [
        HookInfo("cuMemAlloc_v2", "driver", HookMode.parse("bistro,reloc"), True, "",
                 EventKind.ALLOC, True, 5, 0),
        HookInfo("cuMemFree_v2", "driver", HookMode.parse("reloc"), True,
                 "bistro: returns to +6, inside the 12-byte patch", EventKind.FREE, True, 0, 1),
        HookInfo("cudaMalloc", "runtime", HookMode.NONE, False, "no runtime is loaded",
                 EventKind.ALLOC, False, 0, 2),
    ]
    return HookReport(HookMode.parse("bistro,reloc"), hooks, False, queue)


def test_str_is_a_table_with_a_row_per_function() -> None:
    text = str(_report())
    lines = text.splitlines()
    assert lines[0] == ("memhook hooks: mode bistro,reloc; 2 of 3 functions covered, 2 present "
                        "in the loaded libraries; coverage not complete")
    assert lines[1] == "event queue: 2 pending (7 produced, 5 drained), 3 thread lanes"
    header = lines[2].split()
    assert header == ["function", "api", "kind", "present", "mechanism", "jump", "reason"]
    rows = [line.split(None, 6) for line in lines[3:]]
    assert rows == [
        ["cuMemAlloc_v2", "driver", "ALLOC", "yes", "bistro,reloc", "5"],
        ["cuMemFree_v2", "driver", "FREE", "yes", "reloc", "-",
         "bistro: returns to +6, inside the 12-byte patch"],
        ["cudaMalloc", "runtime", "ALLOC", "no", "none", "-", "no runtime is loaded"],
    ]
    # columns line up: every row's mechanism starts where the header's does
    col = lines[2].index("mechanism")
    assert all(line[col - 2:col] == "  " and line[col] != " " for line in lines[3:])


def test_repr_and_fields_stay_the_dataclass() -> None:
    report = _report()
    assert repr(report).startswith("HookReport(mode=<HookMode.")
    assert [f.name for f in dataclasses.fields(report)] == ["mode", "hooks", "coverage_complete",
                                                           "queue", "pointer_attributes"]


def test_status_of_this_process_prints_one_line_per_function() -> None:
    report = memhook.status()
    text = str(report)
    assert len(text.splitlines()) >= len(report.hooks) + 3
    assert max(len(line) for line in text.splitlines()) < 200
    if not report.mode:  # one shared reason is said once, not on every row
        assert "every function: hooks are not installed (mode none)" in text
        assert text.count("not installed (mode none)") == 1
