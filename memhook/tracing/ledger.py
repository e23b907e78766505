"""What ``memhook trace`` keeps while events stream in: the summary's figures.

Memory is bounded by what is *live*, never by how many events went by: per
function a few counters, per failure kind one entry, per device the live
and peak bytes, per traced process its live allocations (address -> size),
and per process a small record.  Events themselves are not kept, but for
the row of each live allocation (an OOM report names its frames).

Accounting rules:

* bytes of an ALLOC are the requested size (pitch x height for pitched),
  of a FREE the size the allocation had (the event's, else the one this
  ledger remembered);
* a failed call (result != 0) counts as a call and a failure, never as
  bytes or live memory; a failed ALLOC for lack of memory also gets an OOM
  report, made then (:mod:`memhook.tracing.oom`);
* module/library globals (``cuModuleGetGlobal``...``cudaGetSymbolAddress``)
  are calls with bytes but not allocations: they are never freed, so they
  are kept out of the live set and the never-freed list;
* pinned host memory (``CUDA_HOST``) is counted on its own "host (pinned)"
  line, not on a device;
* live sets are per connection (one per process image), so a FREE matches
  an ALLOC of the same process; what a process still holds when it ends is
  "never freed" and leaves the live totals (the driver reclaims it);
* a context teardown (a FREE flagged MEMHOOK_EVENT_CONTEXT_RESET: a
  cuDevicePrimaryCtxReset, cuCtxDestroy or last cuDevicePrimaryCtxRelease)
  frees what the process holds on that device, and what it holds of no
  known device (pinned host memory included); all of it when the device is
  not known - as the in-process cache marks those regions (the bytes count
  as the call's).
"""

from __future__ import annotations

import dataclasses
import signal
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from .._binding.cuda_errors import error_name
from .._objects.symbolize import Caller
from .._values.printable import printable
from .modules import ModuleMap
from .oom import OOM_RESULT, REPORTS_MAX, LiveAlloc, OomReport, report
from .protocol import Hello
from .pyframes import SiteLedger
from .bindings import binding_of
from .sites import binding_name, library_label, native_text, way_down

__all__ = ["GLOBAL_FUNCTIONS", "HOST_KEY", "Ledger", "Process", "device_label"]

ALLOC, FREE = 1, 2
CONTEXT_RESET = 0x8  # memhook_event.flags: MEMHOOK_EVENT_CONTEXT_RESET
MEM_TYPES = ("HOST", "CUDA", "CUDA_MANAGED", "CUDA_HOST", "UNKNOWN")
MEM_CUDA_HOST = 3
HOST_KEY = -100
"""The live-bytes key of pinned host memory (device keys are ordinals, -1 unknown)."""

GLOBAL_FUNCTIONS = frozenset({
    "cuModuleGetGlobal", "cuModuleGetGlobal_v2", "cuLibraryGetGlobal", "cuLibraryGetManaged",
    "cudaGetSymbolAddress",
})


def device_label(key: int) -> str:
    if key == HOST_KEY:
        return "host (pinned)"
    return f"cuda:{key}" if key >= 0 else "cuda:?"


def mem_type_name(code: int) -> str:
    return MEM_TYPES[code] if 0 <= code < len(MEM_TYPES) else f"type#{code}"


@dataclasses.dataclass
class Process:
    """One connection: one traced process image."""

    conn_id: int
    """Where its connection was accepted (peers.Peer.accepted): the images
    of one process in the order they ran."""
    hello: Hello | None = None
    kernel_pid: int | None = None
    """The sender's pid by the kernel (``SO_PEERCRED``, this namespace's
    number): what the outputs show.  None: the HELLO's (a unit test)."""
    events: int = 0
    events_sent: int | None = None   # once its area says it reached exit(): events taken
    ended: bool = False
    execed: bool = False                # a later connection came from the same pid
    live: dict[int, tuple] = dataclasses.field(default_factory=dict)
    # address -> (size, device key, function, calling library, Python call site or None,
    #             its row: the OOM report reads ts, tid, caller and frames from it)
    modules: ModuleMap = dataclasses.field(default_factory=ModuleMap)
    signal: int | None = None  # the signal that ended it, where known (CMD's own status)

    @property
    def pid(self) -> int:
        """The kernel pid (the HELLO's where none is known)."""
        if self.kernel_pid is not None:
            return self.kernel_pid
        return self.hello.pid if self.hello else -1

    @property
    def own_pid(self) -> int | None:
        """The pid the process knows itself by (its events carry it), where
        that is not :attr:`pid`: it runs in a PID namespace of its own."""
        if self.hello is None or self.hello.pid == self.pid:
            return None
        return self.hello.pid

    @property
    def how_ended(self) -> str:
        if not self.ended:
            return "still running"
        if self.events_sent is not None:
            return "exited"
        if self.execed:
            return "exec'd"
        if self.signal is not None:
            return f"killed by {_signal_name(self.signal)} (left without exit())"
        return "left without exit() (exec, _exit or a signal)"


class Ledger:
    """Aggregates of every event, per function, device and process."""

    def __init__(self, names: list[str], runtime: list[bool]) -> None:
        self.names = names
        self.runtime = runtime
        self.globals_ = frozenset(i for i, n in enumerate(names) if n in GLOBAL_FUNCTIONS)
        self.calls: dict[int, int] = defaultdict(int)
        self.failed: dict[int, int] = defaultdict(int)
        self.bytes: dict[int, int] = defaultdict(int)
        self.failures: dict[tuple[int, int], list[int]] = {}  # (fn, result) -> [n, max size]
        self.live_bytes: dict[int, int] = defaultdict(int)
        self.peak_bytes: dict[int, int] = defaultdict(int)
        self.never_freed: dict[int, list[int]] = {}  # fn -> [count, bytes]
        self.never_freed_lib: dict[str, list[int]] = {}  # calling library -> [count, bytes]
        self.lib_live: dict[str, int] = defaultdict(int)
        self.lib_peak: dict[str, int] = defaultdict(int)   # each library's own peak
        self.peak_split: dict[str, int] = {}  # live bytes per library when the total peaked
        self._total_live = 0
        self._total_peak = 0
        self.sites: dict[tuple, list[int]] = {}  # --stacks: (library, symbol...) -> [n, bytes]
        self.py_sites = SiteLedger()  # --python: by the program's call site
        self.bindings: dict[str, str] = {}  # calling library -> the binding layer it is
        self._libs: dict = {}  # Caller -> its library (and, noted once, its binding)
        self._ways: dict = {}  # (id of a PyStack, caller, fn) -> (that stack, its way down)
        self.processes: list[Process] = []
        self.ooms: list[OomReport] = []  # the first REPORTS_MAX failures for lack of memory
        self.ooms_more = 0               # and how many more there were
        self.oom_rows: dict[int, tuple[tuple, OomReport]] = {}
        # id(row) -> (that failed row, its report), until a writer takes it (oom_of)
        self.events = 0
        self.first_ns: int | None = None
        self.last_ns = 0

    # ---------------------------------------------------------------- names

    def function_name(self, fn: int) -> str:
        return self.names[fn] if 0 <= fn < len(self.names) else f"function#{fn}"

    def error_name(self, fn: int, result: int) -> str:
        runtime = self.runtime[fn] if 0 <= fn < len(self.runtime) else False
        return error_name(result, runtime)

    # ------------------------------------------------------------ processes

    def process_started(self, proc: Process) -> None:
        if proc.hello is not None:
            for other in self.processes:  # the images it succeeds (conn_id: their order)
                if other.pid == proc.pid and other is not proc and other.conn_id < proc.conn_id:
                    other.execed = True  # (how_ended looks at events_sent first)
        self.processes.append(proc)

    def process_ended(self, proc: Process) -> list[tuple[int, int, int]]:
        """Its live allocations become never-freed and leave the totals.
        Returns the live-bytes changes: (-1, device key, live after)."""
        proc.ended = True
        if proc.hello is not None:
            for other in self.processes:
                if other is not proc and other.pid == proc.pid and other.conn_id > proc.conn_id:
                    proc.execed = True
        return self._release(proc)

    def _release(self, proc: Process) -> list[tuple[int, int, int]]:
        changes = []
        live_bytes = self.live_bytes
        for size, key, fn, lib, site, row in proc.live.values():
            if site is not None:
                self.py_sites.leaked(site, size, self._way_down(row))
            entry = self.never_freed.get(fn)
            if entry is None:
                self.never_freed[fn] = [1, size]
            else:
                entry[0] += 1
                entry[1] += size
            entry = self.never_freed_lib.setdefault(lib, [0, 0])
            entry[0] += 1
            entry[1] += size
            self.lib_live[lib] -= size
            self._total_live -= size
            live_bytes[key] -= size
            changes.append((-1, key, live_bytes[key]))
        proc.live.clear()
        return changes

    def finish(self) -> list[tuple[int, int, int]]:
        """The trace ended: what processes still hold is never freed."""
        changes = []
        for proc in self.processes:
            if proc.live:
                changes += self._release(proc)
        return changes

    # --------------------------------------------------------------- events

    def add(self, proc: Process, rows: list[tuple]) -> list[tuple[int, int, int]]:
        """Account for ``rows`` (EVENT_DTYPE tuples, in order, the caller a
        :class:`~memhook.Caller` or None, then the --stacks frames or None).  Returns the
        live-bytes changes they made: (row index, device key, live after)."""
        if not rows:
            return []
        calls, nbytes = self.calls, self.bytes
        live, live_bytes, peak = proc.live, self.live_bytes, self.peak_bytes
        globals_ = self.globals_
        changes = []
        lib_live, lib_peak = self.lib_live, self.lib_peak
        py_sites = self.py_sites
        i = -1
        for row in rows:
            _, address, size, _, kind, fn, mem_type, device, _, _, result, flags, caller, \
                stack, python = row
            i += 1
            calls[fn] += 1
            if result:
                self._failed(fn, result, size)
                if result == OOM_RESULT and kind == ALLOC and fn not in globals_:
                    self._oom(proc, row)
                continue
            if flags & CONTEXT_RESET:
                changes += self._context_gone(proc, fn, device, i)
                continue
            if kind == ALLOC:
                nbytes[fn] += size
                if not address or fn in globals_:
                    continue
                dev = HOST_KEY if mem_type == MEM_CUDA_HOST else device
                old = live.get(address)
                if old is not None:  # an ALLOC over a live one: its FREE was not seen
                    live_bytes[old[1]] -= old[0]
                    lib_live[old[3]] -= old[0]
                    self._total_live -= old[0]
                    if old[4] is not None:
                        py_sites.free(old[4], old[0])
                lib = self._libs.get(caller)
                if lib is None:
                    lib = self._library(caller)
                site = python.site if python is not None else None
                live[address] = (size, dev, fn, lib, site, row)
                lt = lib_live[lib] + size
                lib_live[lib] = lt
                if lt > lib_peak[lib]:
                    lib_peak[lib] = lt
                if site is not None:
                    py_sites.alloc(site, size)
                self._total_live += size
                if self._total_live > self._total_peak:
                    self._total_peak = self._total_live
                    self.peak_split = {k: v for k, v in lib_live.items() if v > 0}
                    if py_sites.live:
                        py_sites.total_peaked()
                if stack:
                    self._site(stack, size, site)
                total = live_bytes[dev] + size
                live_bytes[dev] = total
                if total > peak[dev]:  # noqa: PLR1730 (a compare is cheaper than max() here)
                    peak[dev] = total
                changes.append((i, dev, total))
            else:
                old = live.pop(address, None)
                if old is None:
                    nbytes[fn] += size
                    continue
                nbytes[fn] += size or old[0]
                lib_live[old[3]] -= old[0]
                if old[4] is not None:
                    py_sites.free(old[4], old[0])
                self._total_live -= old[0]
                dev = old[1]
                total = live_bytes[dev] - old[0]
                live_bytes[dev] = total
                changes.append((i, dev, total))
        self.events += len(rows)
        proc.events += len(rows)
        if self.first_ns is None:
            self.first_ns = rows[0][3]
        self.last_ns = max(self.last_ns, rows[-1][3])
        return changes

    def _context_gone(self, proc: Process, fn: int, device: int, i: int) \
            -> list[tuple[int, int, int]]:
        """A context of ``device`` (-1: not known) was torn down: what
        ``proc`` held there is freed.  Returns the live-bytes changes."""
        gone = [a for a, v in proc.live.items()
                if device < 0 or v[1] == device or v[1] < 0]
        keys: dict[int, None] = {}
        for address in gone:
            size, key, _, lib, site, *_ = proc.live.pop(address)
            self.bytes[fn] += size
            self.lib_live[lib] -= size
            if site is not None:
                self.py_sites.free(site, size)  # freed by the teardown, not leaked
            self._total_live -= size
            self.live_bytes[key] -= size
            keys[key] = None
        return [(i, key, self.live_bytes[key]) for key in keys]

    def _oom(self, proc: Process, row: tuple) -> None:
        """``row``, an ALLOC of ``proc``, failed for lack of memory: report
        what is live on its device now (see :mod:`memhook.tracing.oom`)."""
        if len(self.ooms) >= REPORTS_MAX:
            self.ooms_more += 1
            return
        _, _, size, ts, _, fn, mem_type, device, pid, tid, result, _, caller, stack, \
            python = row
        dev = HOST_KEY if mem_type == MEM_CUDA_HOST else device
        request = LiveAlloc(pid, 0, size, dev, fn, caller.library if caller else "?",
                            python.site if python is not None else None, ts, tid, caller,
                            stack, python)

        def live() -> Iterator[LiveAlloc]:
            for p in self.processes:
                for address, (sz, key, f, lib, site, r) in p.live.items():
                    # (another process's: only what it had made by the failure)
                    if key == dev and (p is proc or r[3] <= ts):
                        yield LiveAlloc(p.pid, address, sz, key, f, lib, site, r[3], r[9], r[12],
                                        r[13], r[14])

        oom = report(request, result, live(), keep_all=not self.ooms)
        self.ooms.append(oom)
        self.oom_rows[id(row)] = (row, oom)

    def oom_of(self, row: tuple) -> OomReport | None:
        """The report of ``row``, a failed ALLOC, for the writer that
        writes it (once: taken, it is forgotten here)."""
        held = self.oom_rows.get(id(row))
        if held is None or held[0] is not row:
            return None
        del self.oom_rows[id(row)]
        return held[1]

    def oom_json(self, oom: OomReport) -> dict:
        """The jsonl ``oom`` record of ``oom``."""
        r = oom.request
        return oom.as_json(self.function_name, self.error_name(r.function, oom.result),
                           device_label)

    def _library(self, caller: Caller | None) -> str:
        """``caller``'s library (its file name), noting the binding layer
        it is; cached by caller."""
        lib = caller.library if caller is not None else "?"
        binding = binding_name(caller)
        if binding is not None:
            self.bindings[lib] = binding
        if len(self._libs) > 100_000:
            self._libs.clear()
        self._libs[caller] = lib
        return lib

    def _way_down(self, row: tuple) -> tuple[str, ...]:
        """The lines under a leaked allocation's call site (cached by stack,
        caller and function: a leak loop costs one)."""
        caller, python, fn = row[12], row[14], row[5]
        key = (id(python), caller, fn)
        held = self._ways.get(key)
        if held is None or held[0] is not python:
            held = (python, way_down(caller, python, self.function_name(fn)))
            if len(self._ways) > 10_000:
                self._ways.clear()
            self._ways[key] = held
        return held[1]

    def _site(self, frames: tuple, size: int, python_site: str | None) -> None:
        """--stacks: count an ALLOC at its call site: the program's (with
        --python), then its first three native frames by symbol, the first
        named with its binding layer."""
        first = frames[0]
        binding = binding_name(first)
        native = tuple(native_text(c) for c in frames[:3])
        if binding is not None:
            native = (f"via {binding}: {native[0]}", *native[1:])
        key = (python_site, *native)
        entry = self.sites.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += size

    def _failed(self, fn: int, result: int, size: int) -> None:
        self.failed[fn] += 1
        entry = self.failures.get((fn, result))
        if entry is None:
            self.failures[(fn, result)] = [1, size]
        else:
            entry[0] += 1
            entry[1] = max(entry[1], size)

    # -------------------------------------------------------------- summary

    def summary(self) -> dict:
        """The summary as plain data (what :func:`format_summary` prints)."""
        fns = sorted(self.calls, key=lambda f: (-self.calls[f], self.function_name(f)))
        return {
            "events": self.events,
            "processes": [
                {"pid": p.pid, "own_pid": p.own_pid, "ppid": p.hello.ppid if p.hello else None,
                 "command": p.hello.command if p.hello else "?",
                 "forked": bool(p.hello and p.hello.forked), "events": p.events,
                 "ended": p.how_ended,
                 "hooks": _install_note(p.hello) if p.hello else "no hello"}
                for p in self.processes
            ],
            "functions": [
                {"function": self.function_name(f), "calls": self.calls[f],
                 "failed": self.failed.get(f, 0), "bytes": self.bytes.get(f, 0)}
                for f in fns
            ],
            "peak_bytes": {device_label(k): v for k, v in
                           sorted(self.peak_bytes.items(), key=lambda kv: (kv[0] == HOST_KEY, kv[0]))},
            "failed": [
                {"function": self.function_name(f), "result": r,
                 "error": self.error_name(f, r), "count": n, "max_size": size}
                for (f, r), (n, size) in sorted(self.failures.items(),
                                                key=lambda kv: (-kv[1][0], kv[0]))
            ],
            "never_freed": [
                {"function": self.function_name(f), "count": n, "bytes": b}
                for f, (n, b) in sorted(self.never_freed.items(), key=lambda kv: -kv[1][1])
            ],
            "never_freed_by_library": [
                {"library": lib, "binding": self.bindings.get(lib), "count": n, "bytes": b}
                for lib, (n, b) in sorted(self.never_freed_lib.items(),
                                          key=lambda kv: (-kv[1][1], kv[0]))
            ],
            "peak_by_library": [
                {"library": lib, "binding": self.bindings.get(lib),
                 "at_peak": self.peak_split.get(lib, 0), "own_peak": self.lib_peak[lib]}
                for lib in sorted(self.lib_peak, key=lambda k: (-self.peak_split.get(k, 0),
                                                                -self.lib_peak[k], k))
            ],
            "top_sites": [
                {"frames": list(k[1:]), "site": k[0], "count": n, "bytes": b}
                for k, (n, b) in sorted(self.sites.items(), key=lambda kv: -kv[1][1])[:10]
            ],
            "bindings": sorted(set(self.bindings.values())),
            **self.py_sites.summary(),
            "oom": ({**self.oom_json(self.ooms[0]),
                     "failures": len(self.ooms) + self.ooms_more} if self.ooms else None),
        }


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _install_note(hello: Hello) -> str:
    if hello.install_rc:
        return f"hooks failed ({hello.why or 'errno ' + str(hello.install_rc)})"
    names = [n for bit, n in ((1, "bistro"), (2, "reloc")) if hello.mode & bit]
    return ",".join(names) if names else "none"


def human_size(n: int) -> str:
    """1536 -> '1.5 KiB'; bytes below 1 KiB as 'N B'."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024.0
        if value < 1024.0 or unit == "PiB":
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{n} B"  # pragma: no cover


def format_summary(summary: dict, mode: str, elapsed_s: float, collector_rss: int) -> str:
    """The summary as the text block ``memhook trace`` ends with."""
    out = []
    procs = summary["processes"]
    out.append(f"== memhook trace summary: {summary['events']} events from {len(procs)} "
               f"process{'es' if len(procs) != 1 else ''} (mode {mode})")
    if procs:
        out.append("processes:")
        for p in procs:
            forked = ", forked" if p["forked"] else ""
            if p.get("own_pid") is not None:
                forked += f", pid {p['own_pid']} in its PID namespace"
            out.append(f"  pid {p['pid']:<7} {p['events']:>9} events  {p['ended']}{forked}; "
                       f"hooks {p['hooks']}: {_clip(p['command'], 60)}")
    out.append("calls and bytes per function:")
    if summary["functions"]:
        out.append(f"  {'function':<30} {'calls':>10} {'failed':>8} {'bytes':>12}")
        for f in summary["functions"]:
            out.append(f"  {f['function']:<30} {f['calls']:>10} {f['failed']:>8} "
                       f"{human_size(f['bytes']):>12}")
    else:
        out.append("  (no calls)")
    out.append("peak live bytes per device:")
    if summary["peak_bytes"]:
        out.append(f"  {'device':<16} {'peak':>12}  (bytes)")
        for dev, peak in summary["peak_bytes"].items():
            out.append(f"  {dev:<16} {human_size(peak):>12}  ({peak} bytes)")
    else:
        out.append("  (nothing allocated)")
    if summary.get("peak_by_library"):
        out.append("peak live bytes by calling library (at the peak of all; each one's own):")
        out.append(f"  {'library':<34} {'at the peak':>12}  {'own peak':>12}")
        for p in summary["peak_by_library"]:
            lib = library_label(p["library"], p.get("binding"))
            out.append(f"  {_clip(lib, 34):<34} {human_size(p['at_peak']):>12}  "
                       f"{human_size(p['own_peak']):>12}")
        if summary.get("bindings") and not summary.get("peak_by_python_site"):
            out.append(f"  ({' and '.join(summary['bindings'])} only carried the calls: "
                       f"--python names the Python code that made them)")
    if summary.get("peak_by_python_site"):
        out.append("peak live bytes by Python call site (--python; at the peak of all; "
                   "each one's own):")
        out.append(f"  {'at the peak':>12}  {'own peak':>12}  program call site")
        for p in summary["peak_by_python_site"][:20]:
            out.append(f"  {human_size(p['at_peak']):>12}  {human_size(p['own_peak']):>12}  "
                       f"{p['site']}")
    out.append("failed calls:")
    if summary["failed"]:
        out.append(f"  {'function':<30} error (result), count, largest request")
        for f in summary["failed"]:
            out.append(f"  {f['function']:<30} {f['error']} ({f['result']})  x{f['count']}"
                       f"  (largest request {human_size(f['max_size'])})")
    else:
        out.append("  (none)")
    if summary.get("oom"):
        out += _oom_lines(summary["oom"])
    if summary.get("top_sites"):
        out.append("top call sites (--stacks; bytes allocated):")
        out.append(f"  {'bytes':>12} {'allocs':>7}  call site (--python's, then native frames, "
                   f"innermost first)")
        for s in summary["top_sites"]:
            frames = " <- ".join(s["frames"])
            if s.get("site"):
                out.append(f"  {human_size(s['bytes']):>12} {s['count']:>6}x  {s['site']}")
                out.append(f"  {'':>12} {'':>7}    {frames}")
            else:
                out.append(f"  {human_size(s['bytes']):>12} {s['count']:>6}x  {frames}")
    out.append("allocations never freed:")
    if summary["never_freed"]:
        out.append(f"  {'function':<30} {'allocations':>18}  {'bytes':>12}")
        for f in summary["never_freed"]:
            plural = "s" if f["count"] != 1 else ""
            out.append(f"  {f['function']:<30} {f['count']:>6} allocation{plural}  "
                       f"{human_size(f['bytes']):>12}  ({f['bytes']} bytes)")
    else:
        out.append("  (none)")
    if summary.get("never_freed_by_library"):
        out.append("allocations never freed by calling library:")
        out.append(f"  {'library':<30} {'allocations':>18}  {'bytes':>12}")
        for f in summary["never_freed_by_library"]:
            plural = "s" if f["count"] != 1 else ""
            lib = library_label(f["library"], f.get("binding"))
            out.append(f"  {_clip(lib, 30):<30} {f['count']:>6} allocation{plural}  "
                       f"{human_size(f['bytes']):>12}  ({f['bytes']} bytes)")
    if summary.get("never_freed_by_python_site"):
        # Last, just above the collector's line: who leaked what, at a glance.
        out.append("allocations never freed by Python call site (--python), and the way "
                   "down to CUDA:")
        out.append(f"  {'bytes':>12} {'allocs':>7}  program call site")
        rows = summary["never_freed_by_python_site"]
        for f in rows[:20]:
            out.append(f"  {human_size(f['bytes']):>12} {f['count']:>7}  {f['site']}")
            for line in f.get("way_down", ()):
                out.append(f"  {'':>12} {'':>7}    {line}")
            if f.get("other_ways"):
                out.append(f"  {'':>12} {'':>7}    (and {f['other_ways']} other ways down)")
        if len(rows) > 20:
            rest = rows[20:]
            out.append(f"  {human_size(sum(r['bytes'] for r in rest)):>12} "
                       f"{sum(r['count'] for r in rest):>7}  ({len(rest)} more call sites)")
    rate = summary["events"] / elapsed_s if elapsed_s > 0 else 0.0
    out.append(f"collector: {summary['events']} events in {elapsed_s:.2f} s "
               f"({rate:,.0f} events/s), peak RSS {collector_rss / 2**20:.1f} MiB")
    # Commands, libraries, sites and symbols are the program's names: a
    # control character in one would reach the terminal (memhook._values.printable).
    return "\n".join(printable(line) for line in out) + "\n"


def _oom_lines(oom: dict) -> list[str]:
    """The summary's OOM section: the first failure for lack of memory."""
    dev = oom["device_name"]
    n = oom["failures"]
    more = f"; {n - 1} more failed after it (see failed calls)" if n > 1 else ""
    out = [f"out of memory on {dev} (the first allocation that failed for lack of "
           f"memory{more}):"]
    py = oom.get("python")
    caller = oom["caller"]
    who = _who(caller, py) if _binding_of(caller) is not None and py else \
        _frame_text(caller) + (f"; at {_py_frame(py[0])}" if py else "")
    out.append(f"  request: {oom['function']} of {human_size(oom['size'])} ({oom['size']} "
               f"bytes): {oom['error']} ({oom['result']}); pid {oom['pid']} tid {oom['tid']}; "
               f"from {who}")
    out.append("  device memory free/total at the failure: not recorded")
    procs = oom["processes"]
    out.append(f"  live on {dev} then: {human_size(oom['live_bytes'])} ({oom['live_bytes']} "
               f"bytes) in {oom['live_count']} allocation{'s' if oom['live_count'] != 1 else ''}"
               f" of {procs} process{'es' if procs != 1 else ''}")
    out.append("  by calling library:")
    out.append(f"    {'library':<40} {'allocs':>7} {'bytes':>10}")
    for e in oom["by_library"]:
        out.append(f"    {_clip(e['library'], 40):<40} {e['count']:>6}x "
                   f"{human_size(e['bytes']):>10}  ({e['bytes']} bytes)")
    if oom["by_python_site"]:
        out.append("  by Python call site (--python):")
        rows = oom["by_python_site"][:20]
        width = _site_width(r["site"] for r in rows)
        out.append(f"    {'program call site':<{width}} {'allocs':>7} {'bytes':>10}")
        for e in rows:
            out.append(f"    {e['site']:<{width}} {e['count']:>6}x "
                       f"{human_size(e['bytes']):>10}  ({e['bytes']} bytes)")
    out.append("  largest live allocations:")
    out.append(f"    {'size':>10}  function, address, pid, tid, caller; then Python and native "
               f"frames")
    for a in oom["largest"]:
        out.append(f"    {human_size(a['size']):>10}  {a['function']} {a['address']:#x} pid "
                   f"{a['pid']} tid {a['tid']} from {_who(a['caller'], a.get('python'))}")
        for f in a.get("python", [])[:8]:
            out.append(f"        at {_py_frame(f)}")
        for f in (a.get("stack") or [])[:8]:
            out.append(f"        {_frame_text(f)}")
    return out


def _binding_of(frame: dict | None) -> Any:
    return binding_of(frame["object"]) if frame else None


def _who(caller: dict | None, python: list[dict] | None) -> str:
    """An OOM line's caller: the Python frame that called through a
    binding layer, the binding beside it; else the native frame."""
    binding = _binding_of(caller)
    if binding is None or not python:
        return _frame_text(caller)
    return f"{_py_frame(python[0])} via {binding.name} ({_frame_text(caller)})"


def _frame_text(frame: dict | None) -> str:
    if frame is None:
        return "?"
    lib = frame["object"].rsplit("/", 1)[-1] or "?"
    name = f"{lib}!{frame['symbol']}" if frame["symbol"] else lib
    return f"{name}+{frame['offset']:#x}" if frame["offset"] else name


def _py_frame(frame: dict) -> str:
    return f"{frame['file']}:{frame['line']} in {frame['function']}"


def _site_width(sites: Iterator[str]) -> int:
    """The site column's width: a site is never clipped (its outer frame,
    at the start, is what tells two sites through one helper apart)."""
    return max((len(s) for s in sites), default=0) + 1


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
