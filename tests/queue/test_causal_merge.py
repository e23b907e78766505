"""The drain's causal order per address range, as a property
(csrc/queue/event_drain.c; fixtures/causal_merge.c): random histories of
four threads allocating and freeing in one small arena - the same address
reused and overlapping ranges reused at other addresses, frees by other
threads, several VMM maps unmapped at once, a native recorder's events,
markers (driver unloads, context resets), frees the driver refuses,
bounded runs interleaved with other runs, the trace's tee - go through the real hook layer
and the real queue, and through a model that knows the true order; the
cache the drained order builds must be the model's at every drain and at
the end.  Under precise time, and with ranges only ever reused exactly,
every range's order must be the true one as events come out (strict).

The fixture is built from the core's own sources (it records through the
hook layer's internals, with the addresses it chooses).  Each of the
drain's causal rules, knocked out of a copy of csrc/, must make it fail:
the property holds because of them, not by luck."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from queue_testing import FIXTURES
from memhook_testing import CSRC, ObjectCache, build_native, core_objects, sanitized_core

CORE = build_native.TARGETS[0]  # libmemhook.so: its sources, include folders


def build(csrc: Path, out: Path, objects: ObjectCache) -> Path:
    """The fixture linked with the core's objects, compiled from ``csrc``
    (objects of files a knockout left alone are the session's, not recompiled)."""
    sources = [p for pattern in CORE.sources for p in sorted(csrc.glob(pattern))]
    flags = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", *build_native.WARNINGS,
             f"-I{csrc / 'include'}", *(f"-I{csrc / inc}" for inc in CORE.includes)]
    objs = objects.compile([*sources, FIXTURES / "causal_merge.c"], flags, tree=csrc)
    subprocess.run(["cc", *flags, *map(str, objs), "-o", str(out), "-ldl", "-lpthread"],
                   check=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory, object_cache: ObjectCache) -> Path:
    return build(CSRC, tmp_path_factory.mktemp("causal") / "causal_merge", object_cache)


def run(exe: Path, *args: str, clock: str = "coarse") -> subprocess.CompletedProcess[str]:
    """The harness, its stamps from `clock` (MEMHOOK_CLOCK) wherever nobody
    asked for precise time: coarse unless told, whatever this host's
    default would choose (clock.c), so that the same histories are
    checked everywhere."""
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600,
                          check=False, env=dict(os.environ, MEMHOOK_CLOCK=clock))


# (seeds, rounds, mode...): coarse time (the default outside the trace:
# FREEs recorded with their address only, sized by the drain), precise time
# switched on and off mid-history, precise time with every range's order
# checked, and exact reuse under coarse time checked strictly.
CASES = {
    "coarse": ("6", "coarse"),
    "mixed": ("4", "mixed"),
    "precise-strict": ("4", "precise", "strict"),
    "exact-strict": ("4", "coarse", "strict", "exact"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("seed", ["1", "0x5eed"])
def test_the_drained_order_builds_the_true_cache(harness: Path, case: str, seed: str) -> None:
    rounds, *mode = CASES[case]
    proc = run(harness, seed, rounds, *mode)
    assert proc.returncode == 0 and proc.stdout.startswith("ok rounds"), (
        proc.stdout[-4000:] + proc.stderr[-2000:])
    assert "error" not in proc.stderr, proc.stderr  # no cycle of links and markers


def test_the_drained_order_with_every_stamp_from_the_tsc(harness: Path) -> None:
    """Where the TSC is the cheaper read every stamp comes from it, precise
    time asked for or not (clock.c): the same histories, strictly checked."""
    proc = run(harness, "0x75c", "4", "coarse", "strict", clock="tsc")
    assert proc.returncode == 0 and proc.stdout.startswith("ok rounds"), (
        proc.stdout[-4000:] + proc.stderr[-2000:])
    assert "error" not in proc.stderr, proc.stderr  # no cycle of links and markers


def test_a_free_is_sized_from_an_alloc_published_past_the_look(
        tmp_path: Path, object_cache: ObjectCache) -> None:
    """A FREE visible to a look whose ALLOC, in another thread, was published
    after the look read that thread's lane (or after it walked the list of
    lanes) comes out with the ALLOC's size, never size unknown: the window
    fixtures/link_past_the_look.c holds open through the drain's test seam
    (event_drain.c built with MH_TEST_SEAMS), which the random histories
    above meet in a few runs out of a hundred on a quiet machine."""
    flags = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", *build_native.WARNINGS,
             f"-I{CSRC / 'include'}", *(f"-I{CSRC / inc}" for inc in CORE.includes)]
    sources = [p for pattern in CORE.sources for p in sorted(CSRC.glob(pattern))]
    seamed = [p for p in sources if p.name == "event_drain.c"]
    assert seamed, "the drain's source moved"
    objs = [*object_cache.compile([p for p in sources if p not in seamed], flags, tree=CSRC),
            *object_cache.compile([*seamed, FIXTURES / "link_past_the_look.c"],
                                  [*flags, "-DMH_TEST_SEAMS"], tree=CSRC)]
    exe = tmp_path / "link_past_the_look"
    subprocess.run(["cc", *flags, *map(str, objs), "-o", str(exe), "-ldl", "-lpthread"],
                   check=True, timeout=600)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_a_free_whose_link_was_lost_is_sized_from_its_own_alloc(
        tmp_path: Path, object_cache: ObjectCache) -> None:
    """A FREE whose address-chain word another address wrote over before it
    was recorded (fixtures/lost_link.c): sized from its ALLOC still pending
    in another lane, never from an earlier allocation at its address whose
    FREE is pending too (size unknown there rather than that size), and in
    a two-thread backlog of 20,000 live allocations - many sharing chain
    words - every FREE sized."""
    flags = ["-std=c11", "-D_GNU_SOURCE", "-O1", "-g", *build_native.WARNINGS,
             f"-I{CSRC / 'include'}", *(f"-I{CSRC / inc}" for inc in CORE.includes)]
    sources = [p for pattern in CORE.sources for p in sorted(CSRC.glob(pattern))]
    objs = object_cache.compile([*sources, FIXTURES / "lost_link.c"], flags, tree=CSRC)
    exe = tmp_path / "lost_link"
    subprocess.run(["cc", *flags, *map(str, objs), "-o", str(exe), "-ldl", "-lpthread"],
                   check=True, timeout=600)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


@pytest.mark.parametrize("sanitizer", ["thread", "address,undefined"])
def test_the_merge_under_a_sanitizer(tmp_path: Path, build_cache: Path, object_cache: ObjectCache,
                                     sanitizer: str) -> None:
    """The drain's own state (the index, the closer set, the markers) and the
    producers' links, under ThreadSanitizer and AddressSanitizer+UBSan: the
    fixture linked with the objects of the session's sanitizer build of the
    core (tests/hooks/test_sanitized_hooks.py's), compiled as it ships."""
    flags = build_native.compile_flags(CORE, sanitizer)
    objs = [*core_objects(sanitized_core(build_cache, sanitizer)),
            *object_cache.compile([FIXTURES / "causal_merge.c"], flags, tree=CSRC)]
    exe = tmp_path / "causal_merge"
    subprocess.run(["cc", *flags, *map(str, objs), "-o", str(exe), "-ldl", "-lpthread"],
                   check=True, timeout=600)
    env = {"ASAN_OPTIONS": "detect_leaks=0", "TSAN_OPTIONS": "halt_on_error=1",
           "UBSAN_OPTIONS": "print_stacktrace=1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([str(exe), "7", "1", "mixed"], capture_output=True, text=True,
                          timeout=600, check=False, env=env)
    assert proc.returncode == 0 and proc.stdout.startswith("ok rounds"), (
        proc.stdout[-3000:] + proc.stderr[-3000:])
    assert "Sanitizer" not in proc.stderr and "runtime error" not in proc.stderr, proc.stderr


# rule -> (file under csrc/, its text, the knocked-out replacement): the
# drain's causal rules, a continued run joining the later run that re-cut
# the lanes (interleaved runs, as Python's applier and queries make), and
# the context reset recorded as a marker (emit.c; not a plain FREE of no
# address, which nothing would order against the other threads' events).
KNOCKOUTS = {
    "links": ("queue/event_drain.c",
              "    if (e->seq != 0) {\n        mh_lane *t = lane_by_id(e->seq);",
              "    if (0) {\n        mh_lane *t = lane_by_id(e->seq);"),
    "overlaps": ("queue/event_drain.c",
                 "    if (e->kind == MEMHOOK_EVENT_ALLOC) {\n        /* Whether it is open",
                 "    if (0) {\n        /* Whether it is open"),
    "markers": ("queue/event_drain.c", "    if (g_nmarkers != 0) {", "    if (0) {"),
    "interleaved runs": ("queue/event_drain.c",
                         "        } else if (!start && *mark != g_run) {",
                         "        } else if (0) {"),
    "context reset marker": (
        "cuda/emit.c",
        "    push_marker(MEMHOOK_EVENT_FREE, f, device, result, MEMHOOK_EVENT_CONTEXT_RESET);",
        "    push(MEMHOOK_EVENT_FREE, f, 0, 0, MEMHOOK_MEM_UNKNOWN, device, result,\n"
        "         MEMHOOK_EVENT_CONTEXT_RESET);"),
}


@pytest.mark.parametrize("rule", sorted(KNOCKOUTS))
def test_it_fails_without_each_causal_rule(tmp_path: Path, object_cache: ObjectCache,
                                           rule: str) -> None:
    csrc = tmp_path / "csrc"
    shutil.copytree(CSRC, csrc, ignore=shutil.ignore_patterns("sim", "__pycache__"))
    where, old, new = KNOCKOUTS[rule]
    source = csrc / where
    text = source.read_text()
    assert text.count(old) == 1, f"the {rule} knockout no longer matches {where}"
    source.write_text(text.replace(old, new))
    exe = build(csrc, tmp_path / "causal_merge", object_cache)
    proc = run(exe, "1", "2")
    assert proc.returncode == 1 and "FAIL" in proc.stdout, (
        f"without the {rule} rule the histories still came out right:\n{proc.stdout[-2000:]}")
