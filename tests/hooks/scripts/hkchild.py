"""What every hook-behaviour scenario script shares (the scripts run in a
child process of their own: installing hooks inside pytest would leak into
other tests).

A scenario is a list of named cases.  Each case records its problems (a
failed check or an exception, with the traceback) instead of stopping, and
its outcome is printed at once as one ``HKCASE <json>`` line, so a crash in a
later case still leaves the earlier outcomes behind (the test side reads
them with tests/hooks/hooks_testing.py).

The scripts use memhook's public API (DESIGN.md section 4): install(),
status(), subscribe(), flush(), memory_type(), lookup(); the CUDA libraries
are the simulator's, called through ctypes like any Python user would.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any, Callable

import memhook
from memhook import EventKind, HookMode, MemoryType

MiB = 1 << 20
SIZES = (64, MiB, 256 * MiB)

# The mode names the tests use; "bistro-far" is bistro with the 12-byte jump
# forced (MEMHOOK_BISTRO_FAR_JUMP=1 is set in the environment by the test).
MODES = {"none": "none", "bistro": "bistro", "reloc": "reloc",
         "bistro,reloc": "bistro,reloc", "bistro-far": "bistro"}


def mode_arg() -> str:
    mode = sys.argv[1]
    if mode not in MODES:
        raise SystemExit(f"unknown mode {mode!r}")
    if mode == "bistro-far" and os.environ.get("MEMHOOK_BISTRO_FAR_JUMP") != "1":
        raise SystemExit("bistro-far needs MEMHOOK_BISTRO_FAR_JUMP=1 in the environment")
    return mode


def uses_reloc(mode: str) -> bool:
    return "reloc" in mode


def uses_bistro(mode: str) -> bool:
    return "bistro" in mode


# ---- outcome reporting -----------------------------------------------------

class Cases:
    """Runs named cases, collecting problems; prints each outcome at once."""

    def __init__(self) -> None:
        self.problems: list[str] | None = None
        self.notes: list[str] | None = None

    @contextlib.contextmanager
    def case(self, name: str) -> Iterator[None]:
        self.problems, self.notes = [], []
        print(f"HKSTART {name}", flush=True)
        try:
            yield
        except Exception:  # noqa: BLE001 - recorded as the case's problem
            self.problems.append("exception:\n" + traceback.format_exc())
        out = {"case": name, "problems": self.problems, "notes": self.notes}
        print("HKCASE " + json.dumps(out), flush=True)
        self.problems = self.notes = None

    def check(self, cond: Any, msg: str) -> bool:
        if not cond:
            assert self.problems is not None, "check() outside a case"
            self.problems.append(msg)
        return bool(cond)

    def note(self, msg: str) -> None:
        assert self.notes is not None
        self.notes.append(msg)


# ---- events ----------------------------------------------------------------

class Recorder:
    """Every event, through a subscriber; take() flushes and hands over what
    arrived since the last take()."""

    def __init__(self, exact: bool = False) -> None:
        self.events: list[memhook.Event] = []
        self.lock = threading.Lock()
        self.sub = memhook.subscribe(self._on_event, exact=exact)

    def _on_event(self, ev: memhook.Event) -> None:
        with self.lock:
            self.events.append(ev)

    def take(self) -> list[memhook.Event]:
        memhook.flush()
        with self.lock:
            out = self.events[:]
            del self.events[:]
        return out


def fmt(ev: memhook.Event) -> str:
    return (f"{ev.kind.name} {ev.function} addr={ev.address:#x} size={ev.size} "
            f"type={ev.mem_type.name} dev={ev.device} result={ev.result} "
            f"pid={ev.pid} tid={ev.tid} flags={ev.flags:#x}")


def fmt_all(evs: list[memhook.Event]) -> str:
    return "[" + "; ".join(fmt(e) for e in evs) + "]"


def cache_regions() -> list:
    from memhook.cache import process_cache

    memhook.flush()
    return process_cache().regions()


# ---- the simulated driver through ctypes ----------------------------------

c_int, c_uint, c_size_t, c_uint64, c_void_p, c_char_p = (
    ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_void_p,
    ctypes.c_char_p)
P = ctypes.POINTER
byref = ctypes.byref


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", c_int), ("requestedHandleTypes", c_int),
                ("location", CUmemLocation), ("win32HandleMetaData", c_void_p),
                ("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", c_int)]


class CUmemPoolProps(ctypes.Structure):
    _fields_ = [("allocType", c_int), ("handleTypes", c_int), ("location", CUmemLocation),
                ("win32SecurityAttributes", c_void_p), ("maxSize", c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]


class CUipcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


_SIGS: dict[str, tuple] = {
    "cuInit": (c_uint,),
    "cuDeviceGet": (P(c_int), c_int),
    "cuDevicePrimaryCtxRetain": (P(c_void_p), c_int),
    "cuCtxSetCurrent": (c_void_p,),
    "cuCtxGetCurrent": (P(c_void_p),),
    "cuCtxCreate": (P(c_void_p), c_uint, c_int),
    "cuCtxCreate_v2": (P(c_void_p), c_uint, c_int),
    "cuCtxDestroy_v2": (c_void_p,),
    "cuMemAlloc": (P(ctypes.c_uint32), c_uint),
    "cuMemAlloc_v2": (P(c_uint64), c_size_t),
    "cuMemAllocPitch": (P(ctypes.c_uint32), P(c_uint), c_uint, c_uint, c_uint),
    "cuMemAllocPitch_v2": (P(c_uint64), P(c_size_t), c_size_t, c_size_t, c_uint),
    "cuMemAllocManaged": (P(c_uint64), c_size_t, c_uint),
    "cuMemFree": (ctypes.c_uint32,),
    "cuMemFree_v2": (c_uint64,),
    "cuMemAllocHost": (P(c_void_p), c_uint),
    "cuMemAllocHost_v2": (P(c_void_p), c_size_t),
    "cuMemHostAlloc": (P(c_void_p), c_size_t, c_uint),
    "cuMemFreeHost": (c_void_p,),
    "cuMemHostRegister": (c_void_p, c_size_t, c_uint),
    "cuMemHostRegister_v2": (c_void_p, c_size_t, c_uint),
    "cuMemHostUnregister": (c_void_p,),
    "cuMemGetAllocationGranularity": (P(c_size_t), P(CUmemAllocationProp), c_int),
    "cuMemCreate": (P(c_uint64), c_size_t, P(CUmemAllocationProp), c_uint64),
    "cuMemRelease": (c_uint64,),
    "cuMemAddressReserve": (P(c_uint64), c_size_t, c_size_t, c_uint64, c_uint64),
    "cuMemAddressFree": (c_uint64, c_size_t),
    "cuMemMap": (c_uint64, c_size_t, c_size_t, c_uint64, c_uint64),
    "cuMemUnmap": (c_uint64, c_size_t),
    "cuMemSetAccess": (c_uint64, c_size_t, P(CUmemAccessDesc), c_size_t),
    "cuMemAllocAsync": (P(c_uint64), c_size_t, c_void_p),
    "cuMemAllocAsync_ptsz": (P(c_uint64), c_size_t, c_void_p),
    "cuMemFreeAsync": (c_uint64, c_void_p),
    "cuMemFreeAsync_ptsz": (c_uint64, c_void_p),
    "cuMemPoolCreate": (P(c_void_p), P(CUmemPoolProps)),
    "cuMemPoolDestroy": (c_void_p,),
    "cuMemAllocFromPoolAsync": (P(c_uint64), c_size_t, c_void_p, c_void_p),
    "cuMemAllocFromPoolAsync_ptsz": (P(c_uint64), c_size_t, c_void_p, c_void_p),
    "cuStreamSynchronize": (c_void_p,),
    "cuModuleLoadData": (P(c_void_p), c_char_p),
    "cuModuleUnload": (c_void_p,),
    "cuModuleGetGlobal": (P(ctypes.c_uint32), P(c_uint), c_void_p, c_char_p),
    "cuModuleGetGlobal_v2": (P(c_uint64), P(c_size_t), c_void_p, c_char_p),
    "cuLibraryLoadData": (P(c_void_p), c_char_p, c_void_p, c_void_p, c_uint, c_void_p,
                          c_void_p, c_uint),
    "cuLibraryUnload": (c_void_p,),
    "cuLibraryGetGlobal": (P(c_uint64), P(c_size_t), c_void_p, c_char_p),
    "cuLibraryGetManaged": (P(c_uint64), P(c_size_t), c_void_p, c_char_p),
    "cuIpcGetMemHandle": (P(CUipcMemHandle), c_uint64),
    "cuIpcOpenMemHandle": (P(c_uint64), CUipcMemHandle, c_uint),
    "cuIpcOpenMemHandle_v2": (P(c_uint64), CUipcMemHandle, c_uint),
    "cuIpcCloseMemHandle": (c_uint64,),
    "cuMemGetAddressRange_v2": (P(c_uint64), P(c_size_t), c_uint64),
}


class Lib:
    """A CUDA library through ctypes with the argument types set, looked up
    lazily (so, with reloc, through the dlsym memhook interposes)."""

    def __init__(self, handle: Any, sigs: dict[str, tuple]) -> None:
        self._h = handle
        self._sigs = sigs
        self._fns: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        fn = self._fns.get(name)
        if fn is None:
            fn = getattr(self._h, name)
            fn.restype = c_int
            if name in self._sigs:
                fn.argtypes = self._sigs[name]
            self._fns[name] = fn
        return fn


def load_driver() -> Lib:
    """libcuda.so.1 (the simulator: the test's environment puts it first)."""
    return Lib(ctypes.CDLL("libcuda.so.1", mode=os.RTLD_GLOBAL), _SIGS)


def ok(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} returned {rc}")


def primary_context(cu: Lib) -> c_void_p:
    ok(cu.cuInit(0), "cuInit")
    dev = c_int()
    ok(cu.cuDeviceGet(byref(dev), 0), "cuDeviceGet")
    ctx = c_void_p()
    ok(cu.cuDevicePrimaryCtxRetain(byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def alloc_free_v2(cu: Lib) -> tuple[Callable[[int], tuple[int, int]], Callable[[int], None]]:
    """cuMemAlloc_v2 and cuMemFree_v2 as run_api_rounds takes them: alloc(size)
    -> (pointer, size), free(pointer); each asserts the call succeeded."""
    def alloc(size: int) -> tuple[int, int]:
        p = c_uint64()
        assert cu.cuMemAlloc_v2(byref(p), size) == 0
        return p.value, size

    def free(p: int) -> None:
        assert cu.cuMemFree_v2(p) == 0

    return alloc, free


def install(mode: str) -> memhook.HookReport:
    return memhook.install(MODES[mode])


def check_install(cases: Cases, mode: str, report: memhook.HookReport) -> None:
    """The report of install(mode) is what the mode promises."""
    want = HookMode.parse(MODES[mode])
    cases.check(report.mode == want, f"status().mode is {report.mode!r}, want {want!r}")
    for h in report.hooks:
        if not h.kind:
            continue  # the pointer-attribute calls: not asked for
        if h.api == "driver" and h.present:
            if uses_bistro(mode) and h.mechanism & HookMode.BISTRO:
                jump = 12 if mode == "bistro-far" else 5
                cases.check(h.bistro_jump == jump,
                            f"{h.name}: bistro jump {h.bistro_jump}, want {jump}")
            if mode in ("bistro", "bistro-far"):
                cases.check(h.installed, f"{h.name} not covered by bistro: {h.reason}")
        if uses_reloc(mode):
            cases.check(h.mechanism & HookMode.RELOC, f"{h.name} not covered by reloc: "
                                                      f"{h.mechanism!r} {h.reason}")


def expect_one(cases: Cases, evs: list[memhook.Event], what: str, *, kind: EventKind,
               function: str, address: int | None = None, size: int | None = None,
               mem_type: MemoryType | None = None, device: Any = None, result: int = 0,
               ) -> memhook.Event | None:
    """Exactly one event, with these fields (None: not checked; device may be
    a tuple of acceptable values); also pid/tid of this thread."""
    if not cases.check(len(evs) == 1, f"{what}: want one {kind.name} {function}, got "
                                      f"{len(evs)}: {fmt_all(evs)}"):
        return None
    ev = evs[0]
    bad = []
    if ev.kind != kind:
        bad.append(f"kind {ev.kind.name}")
    if ev.function != function:
        bad.append(f"function {ev.function} (want {function})")
    if address is not None and ev.address != address:
        bad.append(f"address {ev.address:#x} (want {address:#x})")
    if size is not None and ev.size != size:
        bad.append(f"size {ev.size} (want {size})")
    if mem_type is not None and ev.mem_type != mem_type:
        bad.append(f"mem_type {ev.mem_type.name} (want {mem_type.name})")
    if device is not None:
        devices = device if isinstance(device, tuple) else (device,)
        if ev.device not in devices:
            bad.append(f"device {ev.device} (want {devices})")
    if ev.result != result:
        bad.append(f"result {ev.result} (want {result})")
    if ev.pid != os.getpid():
        bad.append(f"pid {ev.pid} (want {os.getpid()})")
    if ev.tid != threading.get_native_id():
        bad.append(f"tid {ev.tid} (want {threading.get_native_id()})")
    cases.check(not bad, f"{what}: {fmt(ev)}: " + ", ".join(bad))
    return ev


def expect_none(cases: Cases, evs: list[memhook.Event], what: str) -> None:
    cases.check(not evs, f"{what}: want no event, got {fmt_all(evs)}")


def expect_type(cases: Cases, ptr: int, size: int, want: MemoryType, what: str) -> None:
    got = memhook.memory_type(ptr, size)
    cases.check(got == want, f"{what}: memory_type({ptr:#x}, {size}) is {got.name}, "
                             f"want {want.name}")


def run_api_rounds(cases: Cases, rec: Recorder, *, alloc: Callable[[int], tuple[int, int]],
                   free: Callable[[int], None], alloc_name: str, free_name: str,
                   ev_type: MemoryType, query_type: MemoryType, device: Any,
                   sizes: tuple[int, ...] = SIZES) -> None:
    """The per-API contract: allocations of each size, freed in allocation
    order and then in reverse, each give exactly one ALLOC (after the call:
    address, size, type, device) and one FREE (the allocation's size and
    type); memory_type() answers query_type while allocated and HOST after
    the free.  alloc(size) -> (pointer, the size the event must carry)."""
    for order in ("allocation order", "reverse order"):
        live = []
        for size in sizes:
            rec.take()
            ptr, ev_size = alloc(size)
            evs = rec.take()
            what = f"{alloc_name}({size}) [{order}]"
            expect_one(cases, evs, what, kind=EventKind.ALLOC, function=alloc_name,
                       address=ptr, size=ev_size, mem_type=ev_type, device=device)
            expect_type(cases, ptr, ev_size, query_type, what)
            region = memhook.lookup(ptr, ev_size)
            cases.check(region is not None and region.start <= ptr
                        and region.start + region.size >= ptr + ev_size,
                        f"{what}: lookup({ptr:#x}, {ev_size}) is {region}")
            live.append((ptr, ev_size, size))
        frees = live if order == "allocation order" else live[::-1]
        for ptr, ev_size, size in frees:
            rec.take()
            free(ptr)
            evs = rec.take()
            what = f"{free_name}({alloc_name}({size})) [{order}]"
            expect_one(cases, evs, what, kind=EventKind.FREE, function=free_name,
                       address=ptr, size=ev_size, mem_type=ev_type, device=device)
            expect_type(cases, ptr, ev_size, MemoryType.HOST, what + " after the free")


def run_failure(cases: Cases, rec: Recorder, *, call: Callable[[], int], name: str,
                size: int | None, what: str) -> None:
    """A failed allocation: one ALLOC with the call's error and address 0, and
    nothing new in the cache."""
    before = cache_regions()
    rec.take()
    rc = call()
    evs = rec.take()
    if not cases.check(rc != 0, f"{what}: the call succeeded (the case needs a failure)"):
        return
    expect_one(cases, evs, what, kind=EventKind.ALLOC, function=name, address=0, size=size,
               result=rc)
    after = cache_regions()
    cases.check(after == before, f"{what}: the cache changed: {before} -> {after}")


def run_null_free(cases: Cases, rec: Recorder, *, call: Callable[[], Any], what: str) -> None:
    rec.take()
    call()
    expect_none(cases, rec.take(), what)


# ---- code bytes of a loaded library, against its file -----------------------

def loaded_path(soname: str) -> tuple[str, int]:
    """(path, load base) of the loaded library whose file name is soname."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5].strip()) == soname \
                    and int(fields[2], 16) == 0:
                return fields[5].strip(), int(fields[0].split("-")[0], 16)
    raise RuntimeError(f"{soname} is not loaded")


def exports(path: str, names: list[str]) -> dict[str, tuple[int, bytes]]:
    """name -> (st_value, the first 16 bytes of its code in the file)."""
    from elftools.elf.elffile import ELFFile

    out = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
        for name in names:
            syms = dynsym.get_symbol_by_name(name)
            if not syms:
                continue
            value = syms[0]["st_value"]
            seg = next(s for s in loads if s["p_vaddr"] <= value < s["p_vaddr"] + s["p_filesz"])
            f.seek(seg["p_offset"] + value - seg["p_vaddr"])
            out[name] = (value, f.read(16))
    return out


def code_changes(soname: str, names: list[str]) -> list[str]:
    """The functions among names whose first 16 bytes in memory differ from
    the file (what an entry patch would change)."""
    path, base = loaded_path(soname)
    changed = []
    for name, (value, disk) in exports(path, names).items():
        if ctypes.string_at(base + value, len(disk)) != disk:
            changed.append(name)
    return changed


def resolves_to_own_code(soname: str, lib: Any, names: list[str]) -> list[str]:
    """The functions among names that a fresh dlsym (ctypes) on lib does NOT
    resolve to the library's own code (a wrapper would be elsewhere)."""
    path, base = loaded_path(soname)
    wrong = []
    for name, (value, _) in exports(path, names).items():
        addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        if addr != base + value:
            wrong.append(f"{name}: {addr:#x} != {base + value:#x}")
    return wrong


def wx_mappings() -> list[str]:
    """Mappings of this process that are writable and executable."""
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if line.split()[1][1:3] == "wx"]
