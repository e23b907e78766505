"""The core's long control calls (memhook._binding.control) go through memhook's one
binding, the extension memhook._native: builtins that keep the GIL
(csrc/pyext/control.c), not a second binding through ctypes.  Arrays reach
them as buffers checked against the count asked for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import memhook
from memhook import _native
from memhook._binding import control as _control  # type: ignore[attr-defined]
from memhook._binding.core import ffi

PACKAGE = Path(memhook.__file__).parent


def test_no_module_calls_the_core_through_ctypes() -> None:
    """ctypes may load the core (memhook._binding.core binds it by soname before
    the extension loads) but calls none of its functions."""
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if re.search(r"\bPyDLL\b|_core_handle\.\w+\(|_core_handle\[", p.read_text())]
    assert offenders == []


def test_the_control_calls_are_builtins_of_the_extension() -> None:
    for name in ("control_install", "control_uninstall", "control_coverage_complete",
                 "control_queue_stats", "control_events_drain_into", "control_hook_rows",
                 "control_cuda_reserved_ranges"):
        fn = getattr(_native, name)
        assert type(fn).__name__ == "builtin_function_or_method", name
        assert fn.__module__ in (None, "memhook._native"), (name, fn.__module__)


def test_a_buffer_smaller_than_the_count_is_refused_not_overrun() -> None:
    info_size = ffi.sizeof("memhook_hook_info")
    with pytest.raises(ValueError, match="fewer than the 3 items"):
        _native.control_hook_rows(bytearray(2 * info_size), 3)
    mark, filled = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    with pytest.raises(ValueError, match="events"):
        _native.control_events_drain_into(bytearray(64 * 3), 4, ffi.buffer(mark),
                                          ffi.buffer(filled))
    with pytest.raises(BufferError, match="not writable"):
        _native.control_queue_stats(b"read-only bytes are no output buffer")
    with pytest.raises(ValueError, match="fewer"):
        _native.control_queue_stats(bytearray(8))


def test_the_wrappers_answer_as_before() -> None:
    count = int(memhook._binding.core.lib.memhook_hook_count())
    table = ffi.new("memhook_hook_info[]", count)
    assert _control.hook_rows(table, count) == count
    assert {ffi.string(table[i].name).decode() for i in range(count)} >= {"cuMemAlloc_v2",
                                                                          "cudaFree"}
    stats = ffi.new("memhook_queue_stats *")
    _control.queue_stats(stats)
    assert stats.consumed <= stats.produced
    ranges = _control.cuda_reserved_ranges()
    assert ranges is None or all(a < b for a, b in ranges)
    assert isinstance(_control.coverage_complete(), bool)


@pytest.mark.parametrize(("refused", "sizes"), [("events", (3, 8, 8)), ("mark", (4, 7, 8)),
                                                ("filled", (4, 8, 7))])
def test_a_refused_buffer_is_named_and_none_stays_held(refused: str,
                                                       sizes: tuple[int, int, int]) -> None:
    """Each of the three buffers is checked in turn; whichever is refused,
    those taken before it are let go (a bytearray with a live export cannot
    grow)."""
    event = ffi.sizeof("memhook_event")
    events, mark, filled = bytearray(sizes[0] * event), bytearray(sizes[1]), bytearray(sizes[2])
    with pytest.raises(ValueError, match=f"^{refused}: a buffer of .* fewer than the"):
        _native.control_events_drain_into(events, 4, mark, filled)
    for buf in (events, mark, filled):
        buf.append(0)
    with pytest.raises(TypeError, match=r"control_events_drain\(\) takes 3 arguments \(2 given\)"):
        _native.control_events_drain(events, 4)
