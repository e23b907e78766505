"""Pointer attributes (csrc/cuda/pointer_attributes.c): the driver's
cuPointerGetAttribute(s) and the runtime's cudaPointerGetAttributes,
answered from the cache where it knows the answer exactly, on the
simulator.

The differential (tests/fixtures/pointer_attributes_diff.c) asks every
attribute of CUDA 13's CUpointer_attribute about host (malloc, stack, mmap,
NULL), device (base, interior, one past the end), freed, managed, pinned
(cuMemHostAlloc, cudaHostRegister), pool, VMM (mapped and reserved only),
IPC-imported memory and module globals, with a current context and with
none, each query twice in a row - memhook's answers off, then on - and
fails on any difference in return code or output bytes.  tests/gpu/
test_pointer_attributes_gpu.py runs it against the real driver."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hooks_testing import SCRIPTS
from memhook_testing import NativeBuild

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "pointer_attributes_diff.c"

# Queries memhook must answer itself (not merely pass through) on the
# simulator: host memory, device memory, freed memory, managed and pinned.
ANSWERED = [
    "host_malloc ctx get:MEMORY_TYPE", "host_malloc ctx gets:four", "host_stack noctx gets:four",
    "null ctx get:MEMORY_TYPE", "device_base ctx get:MEMORY_TYPE", "device_base ctx gets:four",
    "device_interior noctx gets:four", "device_freed ctx gets:four",
    "device_freed ctx get:MEMORY_TYPE", "managed ctx get:IS_MANAGED", "pool ctx gets:four",
    "pinned_hostalloc ctx gets:four", "pinned_registered ctx get:RANGE_SIZE",
    "host_malloc ctx cudaPointerGetAttributes", "device_base ctx cudaPointerGetAttributes",
    "device_interior ctx get:DEVICE_POINTER", "managed ctx gets:DEVICE_POINTER",
    # no current context: the range of memory in no allocation left untouched
    "null noctx gets:RANGE_START_ADDR", "host_mmap noctx gets:RANGE_SIZE",
]
# ... and must leave to the driver (their attributes are not their regions').
PASSED = ["vmm_mapped ctx gets:four", "vmm_unmapped_half ctx gets:four", "global_managed ctx get:IS_MANAGED",
          "ipc_imported ctx get:DEVICE_ORDINAL", "device_base ctx get:CONTEXT",
          "device_base ctx get:BUFFER_ID", "device_base noctx get:DEVICE_POINTER",
          "device_base noctx gets:DEVICE_POINTER", "pinned_hostalloc ctx get:DEVICE_POINTER",
          "host_malloc ctx get:DEVICE_POINTER"]


@pytest.fixture(scope="module")
def differential(native: NativeBuild, c_test_dir: Path) -> Path:
    return native.compile(FIXTURE, c_test_dir / "pointer_attributes_diff", extra=["-ldl"])


def _lines(stdout: str) -> dict[str, str]:
    """'case ctx query' -> the rest of its line (who answered stripped)."""
    out = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) > 4 and words[0] in ("memhook", "driver"):
            out[" ".join(words[1:4])] = words[0] + " " + " ".join(words[4:])
    return out


def test_the_fixture_runs_on_the_simulator_alone(native: NativeBuild,
                                                 differential: Path) -> None:
    proc = native.run([str(differential)], timeout=120)
    assert "answers absent" in proc.stdout
    assert not any(v.startswith("memhook") for v in _lines(proc.stdout).values())


@pytest.mark.parametrize("mode", ["bistro,reloc", "bistro", "reloc"])
def test_answers_equal_the_drivers(native: NativeBuild, differential: Path, mode: str) -> None:
    alone = _lines(native.run([str(differential)], timeout=120).stdout)
    env = native.env(LD_PRELOAD=str(native.core), MEMHOOK_INSTALL_AT_LOAD="1",
                     MEMHOOK_CUDA_MODE=mode, MEMHOOK_POINTER_ATTRIBUTES="1")
    proc = subprocess.run([str(differential)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0 and "MISMATCH" not in proc.stderr, proc.stdout + proc.stderr
    assert "answers toggled" in proc.stdout
    lines = _lines(proc.stdout)
    cases = {k.split()[0] for k in lines}
    for case in ("host_malloc", "device_end", "device_freed", "managed", "pinned_registered",
                 "pool", "vmm_mapped", "vmm_unmapped_half", "global_managed", "ipc_imported"):
        assert case in cases, sorted(cases)
    answered = [k for k in ANSWERED if not (mode == "bistro" and "cudaPointer" in k)]
    missing = [k for k in answered if not lines[k].startswith("memhook")]
    # memhook passes a call to the driver while another thread holds the
    # drain (the keeper of MEMHOOK_INSTALL_AT_LOAD drains every 10 ms, and on
    # a loaded box it can be descheduled holding it): a case left to the
    # driver that way, with the same answer, is asked again in a new process.
    for _ in range(3):
        if not missing:
            break
        again = subprocess.run([str(differential)], capture_output=True, text=True, env=env,
                               timeout=120)
        assert again.returncode == 0 and "MISMATCH" not in again.stderr, again.stderr
        redo = _lines(again.stdout)
        missing = [k for k in missing if not redo[k].startswith("memhook")]
    assert not missing, missing
    assert not [k for k in PASSED if lines[k].startswith("memhook")]
    # The same answers as a process without memhook (values that name this
    # process - P2P tokens hold the pid - aside).
    differ = [k for k, v in lines.items() if "P2P_TOKENS" not in k and k in alone
              and v.split(" ", 1)[1] != alone[k].split(" ", 1)[1]]
    assert not differ, [(k, alone[k], lines[k]) for k in differ[:5]]


@pytest.mark.parametrize("mode", ["bistro,reloc", "reloc"])
def test_install_switch_status_and_uninstall(native: NativeBuild, mode: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "pointer_attributes_api.py"), mode],
                          capture_output=True, text=True, timeout=120,
                          env=native.env(MEMHOOK_POINTER_ATTRIBUTES="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    # None reads the environment: on.
    assert out["default"][0] is True and out["env"] is True
    on, rows = out["on"][0], out["on"][1]
    assert on is True and out["on_str"]
    assert rows["cuPointerGetAttribute"][0] != "none" and rows["cudaPointerGetAttributes"][0] == "reloc"
    assert out["on"][2] == []
    # memhook answers: device memory DEVICE; host memory INVALID_VALUE, from
    # memhook only where the hooks cover every entry point (reloc alone,
    # installed after the driver was loaded, does not: the driver answers)
    vouched = int(mode != "reloc")
    assert out["on_answers"] == [[0, 2, 1], [1, 0xAAAAAAAA, vouched]]
    assert out["patched_on"] is ("bistro" in mode)
    off, off_rows, restored, answer = out["off_again"]
    assert off is False and all(r[0] == "none" for r in off_rows.values()), off_rows
    assert restored is True and answer == [0, 2, 0]  # the driver's answer, not memhook's
    assert "must be True, False or None" in out["bad_1"] and "not 'yes'" in out["bad_yes"]
    assert out["after_bad"] is True  # a refused value installs nothing
    assert out["uninstalled"][0] is False or out["uninstalled"][1]["cuPointerGetAttribute"][0] == "none"
    assert all(r[0] == "none" for r in out["uninstalled"][1].values())
    assert out["restored"] is True
    assert [a[2] for a in out["after_uninstall_answers"]] == [0, 0]
    assert [a[:2] for a in out["after_uninstall_answers"]] == [[0, 2], [1, 0xAAAAAAAA]]


def test_off_by_default_and_listed_as_off(native: NativeBuild) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "pointer_attributes_api.py"),
                           "bistro,reloc"], capture_output=True, text=True, timeout=120,
                          env=native.env(MEMHOOK_POINTER_ATTRIBUTES="0"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    pa, rows, uncovered = out["default"]
    assert pa is False and uncovered == []
    assert all(r[0] == "none" and "pointer attributes are off" in r[1] for r in rows.values())
    # Not routed to memhook: the driver answers (nothing counted).
    assert [a[2] for a in out["off_answers"]] == [0, 0]
    assert out["env"] is False


def test_a_bad_environment_value_is_refused(native: NativeBuild) -> None:
    code = ("import memhook, memhook.sim; memhook.sim.activate()\n"
            "try:\n    memhook.install('reloc')\nexcept ValueError as e:\n    print('VE', e)\n"
            "print(memhook.status().mode)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=native.env(MEMHOOK_POINTER_ATTRIBUTES="yes"))
    assert proc.returncode == 0, proc.stderr
    assert "VE MEMHOOK_POINTER_ATTRIBUTES='yes': valid values are 1" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "none"


def test_a_bad_knob_at_load_warns_and_stays_off(native: NativeBuild, differential: Path) -> None:
    env = native.env(LD_PRELOAD=str(native.core), MEMHOOK_INSTALL_AT_LOAD="1",
                     MEMHOOK_CUDA_MODE="bistro,reloc", MEMHOOK_POINTER_ATTRIBUTES="on")
    proc = subprocess.run([str(differential)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MEMHOOK_POINTER_ATTRIBUTES" in proc.stderr and "1 (answer" in proc.stderr, proc.stderr
    # off: the calls are not routed to memhook, whatever the program toggles
    assert not any(v.startswith("memhook") for v in _lines(proc.stdout).values())


@pytest.mark.parametrize("mode", ["bistro,reloc", "reloc"])
def test_threads_allocating_and_asking_at_once(native: NativeBuild, c_test_dir: Path,
                                               mode: str) -> None:
    """Four threads each allocate, ask about the allocation (its ALLOC must be
    in the cache before memhook answers: a stale cache answers "not CUDA"),
    free and ask again; then a fork child, whose driver is not initialised,
    asks too (NOT_INITIALIZED, as the driver answers, not the inherited
    cache's answer)."""
    exe = native.compile(FIXTURE.parent / "pointer_attributes_threads.c",
                         c_test_dir / "pointer_attributes_threads", extra=["-ldl", "-lpthread"])
    env = native.env(LD_PRELOAD=str(native.core), MEMHOOK_INSTALL_AT_LOAD="1",
                     MEMHOOK_CUDA_MODE=mode, MEMHOOK_POINTER_ATTRIBUTES="1")
    proc = subprocess.run([str(exe), "4", "1500", "fork"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrong 0 " in proc.stdout and "child: device rc 3, host rc 3" in proc.stdout
    answered = int(proc.stdout.split("answered ")[1].split()[0])
    # memhook answered, not only the driver (which alone gives 0).  How many
    # is the scheduler's to say, not memhook's.  The four threads feed the
    # cache themselves: a call that finds events unfed takes the consumer
    # lock, if free, and feeds every lane's.  On a loaded box one thread
    # ends up doing that nearly all the time (the others' events arrive as
    # fast as it feeds them, and it is preempted holding the lock), so the
    # other three find the lock held at almost every call, their lanes back
    # up by hundreds of events, and the span summaries of those events
    # (lane_span.c: one interval per block) cover every address the four
    # threads allocate from; so their calls go to the driver, as the rule
    # says they must when an event the map lacks may touch the answer.
    # Every answer is still right ("wrong 0"), and the count proves the
    # routing, not a rate (test_answers_while_another_thread_holds_the_drain
    # holds the rate where the schedule is fixed).
    assert answered > 0, proc.stdout


BUSY = FIXTURE.parent / "pointer_attributes_busy.c"


def _busy(native: NativeBuild, c_test_dir: Path, mode: str, how: str) -> str:
    core = native.core.parent
    exe = native.compile(BUSY, c_test_dir / "pointer_attributes_busy",
                         extra=[f"-L{core}", "-lmemhook", f"-Wl,-rpath,{core}", "-ldl",
                                "-lpthread"])
    env = native.env(LD_PRELOAD=str(native.core), MEMHOOK_INSTALL_AT_LOAD="1",
                     MEMHOOK_CUDA_MODE=mode, MEMHOOK_POINTER_ATTRIBUTES="1")
    proc = subprocess.run([str(exe), "2", "3000", how], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0 and "wrong 0 " in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("mode", ["bistro,reloc", "reloc"])
def test_answers_while_another_thread_holds_the_drain(native: NativeBuild, c_test_dir: Path,
                                                      mode: str) -> None:
    """Two threads allocate and free in a tight loop while a third holds the
    consumer lock (a drain that takes its time), so their events pile up
    unfed; a fourth asks about host memory and a long-lived device
    allocation, which none of those events touches: memhook answers most
    calls itself, each as the driver does.  Then it asks about memory the
    unfed events do touch - another thread's new allocation and its free
    of unknown size, its own new allocation - and those go to the driver."""
    out = _busy(native, c_test_dir, mode, "hold")
    found = re.search(r"wrong 0 answered (\d+) of (\d+)", out)
    assert found, out
    answered, total = int(found[1]), int(found[2])
    assert answered > total // 2, out  # most answered, not passed to the driver
    assert "touched: answered 0 of 6" in out, out
    assert "query: from the cache 2 of 2" in out, out  # memhook_query's rule is the same


def test_answers_beside_a_consumer_draining_in_a_loop(native: NativeBuild,
                                                      c_test_dir: Path) -> None:
    """A consumer draining in a loop beside the allocators: every answer,
    memhook's or the driver's, is the driver's."""
    _busy(native, c_test_dir, "bistro,reloc", "drain")


@pytest.mark.parametrize("mode", ["bistro,reloc", "reloc"])
def test_an_answer_follows_another_threads_free_of_the_range(native: NativeBuild,
                                                             c_test_dir: Path,
                                                             mode: str) -> None:
    """A thread asks about a device allocation twice (the second answer from
    its memo of the cache's last answers), another thread frees it and
    allocates again - a new size, or nothing - and the first asks about the
    same pointer again: every answer is the driver's, before the free and
    after it."""
    exe = native.compile(FIXTURE.parent / "pointer_attributes_refree.c",
                         c_test_dir / "pointer_attributes_refree",
                         extra=[f"-L{native.core.parent}", "-lmemhook",
                                f"-Wl,-rpath,{native.core.parent}", "-ldl", "-lpthread"])
    env = native.env(LD_PRELOAD=str(native.core), MEMHOOK_INSTALL_AT_LOAD="1",
                     MEMHOOK_CUDA_MODE=mode, MEMHOOK_POINTER_ATTRIBUTES="1")
    proc = subprocess.run([str(exe), "300"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"wrong 0 before (\d+) after (\d+) of (\d+)", proc.stdout)
    assert found, proc.stdout
    before, after, total = (int(x) for x in found.groups())
    # memhook answered both sides itself, not only the driver: the asks
    # before the free (the memo's) and after it (the map searched again).
    # Nothing else touches the cache here, so nearly all are memhook's.
    assert before > total // 2 and after > total // 4, proc.stdout
