/*
 * trace_proto.h - the wire format between a traced process and the
 * `memhook trace` collector (memhook/tracing/protocol.py mirrors it; a test
 * compares the two).
 *
 * Events do not travel on the socket.  Each traced process image writes
 * them into a trace area (mh_trace_area below): a memfd it maps MAP_SHARED
 * and hands to the collector once, with SCM_RIGHTS, in the HELLO of a
 * short AF_UNIX SOCK_SEQPACKET connection to the path in
 * MEMHOOK_TRACE_SOCKET.  The process then closes the socket and the memfd
 * (the mapping stays): nothing it later does to its descriptors, and no
 * way it ends (_exit, a signal, a crash, exec), takes the events away from
 * the collector, which reads the area while the process runs and to its
 * end after the process is gone (pidfd), or after the same pid's next
 * image said HELLO (exec).  Integers are the host's (little-endian x86-64)
 * byte order; both ends run on the same machine.
 *
 *   HELLO   a traced process's one message: who it is (mh_trace_hello, then
 *           exe, cmdline and why bytes) and, as SCM_RIGHTS, its area's fd
 *           (sealed against shrinking where the kernel allows).  The
 *           collector believes none of it blindly: the sender is the
 *           kernel's SO_PEERCRED pid, the pid claimed must be that process
 *           in one of its PID namespaces, and every offset and count of
 *           the area is checked against the memfd's real size.
 *   NESTED  a header alone, from a `memhook trace` inside a traced program
 *           (below).
 *   ESCAPE  from a traced process about to exec or spawn a program the
 *           core cannot follow into (trace_exec.h): a header whose count
 *           is MH_TRACE_ESCAPE_* (| MH_TRACE_ESCAPE_SPAWNED), then the
 *           program's path (no NUL), no descriptor.
 *   EXPECT  a header alone, with a pidfd of a process whose first traced
 *           image is still to come (SCM_RIGHTS): a posix_spawn child, sent
 *           by its parent once the spawn returned, or a vfork (or raw
 *           clone) child, sent by the child itself just before its exec.
 *           Neither ran an atfork handler, and the parent may exit as soon
 *           as the exec is done, before the loader has run the child's
 *           core: the collector waits for the process until one of its
 *           images says HELLO or it ends.
 */
#ifndef MEMHOOK_TRACE_PROTO_H
#define MEMHOOK_TRACE_PROTO_H

#include <stdint.h>

#define MH_TRACE_MAGIC 0x3154484Du /* "MHT1" */
/* 3: events carry `caller` (memhook.h: 16-bit kind/function/mem_type/
 * device), and the area holds module records and stack records.
 * 4: and Python records and code records (--python).
 * 5: EXPECT. */
#define MH_TRACE_VERSION 5

#define MH_TRACE_HELLO 1
/* (2 and 3 were version 1's EVENTS and BYE, events on the socket.)
 * Sent (header only, no descriptor) by a `memhook trace` that runs inside
 * a traced program, to the outer collector: the inner trace's command
 * reports to the inner collector, and the outer one says so. */
#define MH_TRACE_NESTED 4
/* Sent (header, then a path) by a traced process just before it execs or
 * spawns a program that will run without the core; the header's count
 * says why (trace_exec.h finds it out; the collector names the program). */
#define MH_TRACE_ESCAPE 5
#define MH_TRACE_ESCAPE_SECURE 1      /* set-user/group-ID or file capabilities: AT_SECURE */
#define MH_TRACE_ESCAPE_STATIC 2      /* no PT_INTERP: no loader, so no LD_PRELOAD */
#define MH_TRACE_ESCAPE_FOREIGN 3     /* an ELF of another class or machine */
#define MH_TRACE_ESCAPE_ENV 4         /* an environment too large to mend on the stack */
#define MH_TRACE_ESCAPE_SPAWNED 0x100u /* posix_spawn*: a child runs it, not the sender */
/* Sent (header, a pidfd) for a process whose first image is still to
 * come; see EXPECT above. */
#define MH_TRACE_EXPECT 6

/* mh_trace_hello.flags */
#define MH_TRACE_HELLO_FORKED 0x1u /* a fork() child of a traced process */

typedef struct mh_trace_header {
    uint32_t magic;    /* MH_TRACE_MAGIC */
    uint16_t version;  /* MH_TRACE_VERSION */
    uint16_t type;     /* MH_TRACE_HELLO / _NESTED / _ESCAPE / _EXPECT */
    uint32_t count;    /* 0; ESCAPE: why (MH_TRACE_ESCAPE_*) */
    uint32_t reserved;
} mh_trace_header;     /* 16 bytes */

typedef struct mh_trace_hello {
    int32_t pid;
    int32_t ppid;
    uint32_t mode;         /* MEMHOOK_MODE_* bits the hooks were installed with */
    int32_t install_rc;    /* 0, or the errno of parsing MEMHOOK_CUDA_MODE or
                              of memhook_hooks_install (why says more) */
    uint32_t core_version; /* memhook_version_number() */
    uint32_t flags;        /* MH_TRACE_HELLO_* */
    uint64_t start_ns;     /* CLOCK_MONOTONIC when the process connected */
    uint32_t exe_len;      /* bytes of /proc/self/exe's target that follow */
    uint32_t cmdline_len;  /* then bytes of /proc/self/cmdline (NUL-separated) */
    uint32_t why_len;      /* then the install failure's reason, if any */
    uint32_t reserved;
} mh_trace_hello;          /* 48 bytes */

/* ---- the trace area (a memfd, shared by the process and the collector) ----
 *
 * Offsets, never pointers: the two sides map it at different addresses.
 * Layout: this header (one page), then struct-of-arrays segment
 * descriptors (each array at the offset the header names), then nseg
 * segments of MH_TRACE_SEG_EVENTS events, each page-aligned.
 *
 * A segment is owned by one thread at a time and written only by it:
 *   FREE -> CLAIMING -> OWNED -> CLOSED -> (collector read it all and
 *   wrote done[i] = claim[i]) -> CLAIMING -> ...
 * The producer writes published[i] (release) after each event, and
 * CLOSED after the last one; the collector writes only done[i] and
 * done_total (plain stores).  A segment is reused only once done[i] ==
 * claim[i], so the collector never loses a generation it started. */
#define MH_TRACE_AREA_MAGIC 0x41544D48u /* "HMTA" */
#define MH_TRACE_SEG_EVENTS 256
#define MH_TRACE_SEG_FREE 0
#define MH_TRACE_SEG_CLAIMING 1
#define MH_TRACE_SEG_OWNED 2
#define MH_TRACE_SEG_CLOSED 3
/* MEMHOOK_TRACE_BUFFER_MB: the most event storage one process image holds
 * for a collector that is behind (default; 4..4096). */
#define MH_TRACE_BUFFER_MB_DEFAULT 256

typedef struct mh_trace_area {
    uint32_t magic;          /* MH_TRACE_AREA_MAGIC */
    uint32_t version;        /* MH_TRACE_VERSION */
    uint32_t seg_events;     /* MH_TRACE_SEG_EVENTS */
    uint32_t nseg;
    uint64_t size;           /* bytes of the memfd */
    uint64_t state_off;      /* uint32_t state[nseg]  (MH_TRACE_SEG_*) */
    uint64_t tid_off;        /* int32_t tid[nseg] */
    uint64_t claim_off;      /* uint64_t claim[nseg]: 1 + the claim's number */
    uint64_t published_off;  /* uint64_t published[nseg]: events written */
    uint64_t done_off;       /* uint64_t done[nseg]: collector: claim it finished */
    uint64_t events_off;     /* segment i's events at events_off + i * 16 KiB */
    int32_t pid;
    uint32_t exited;         /* 1 once exit() ran (the library destructor) */
    uint64_t tsc0, ns0;      /* clock anchor at creation (stamps are raw TSC
                                when an event's flags say so, memhook.h) */
    uint64_t anchor_seq;     /* odd while tsc1/ns1 are written (seqlock) */
    uint64_t tsc1, ns1;      /* the latest anchor (the streamer, exit) */
    uint64_t first_off;      /* uint64_t first[nseg]: the stamp of the segment's
                                first event (written at claim) */
    /* producers' counters, a line of their own */
    uint64_t fresh;          /* segments taken never used before */
    uint64_t claims;         /* claims so far */
    uint64_t scan;           /* where the next search for a done segment starts */
    uint64_t lost;           /* events that found no room while segments waited for
                                the collector (it fell behind): LOUD at the collector */
    uint64_t lost_owned;     /* events that found no room because every segment was
                                owned by a live thread (more threads than segments) */
    uint64_t lost_forked;    /* events of children made without fork()'s handlers (a
                                raw fork or clone system call): such a child has no
                                area; it counts them here, in the page it inherited */
    uint64_t pad1[2];
    /* the collector's line */
    uint64_t done_total;     /* segments the collector finished, ever */
    uint64_t pad2[7];
    /* module records (mh_trace_module): the objects the process had
     * loaded, appended at area creation and whenever the set changed; one
     * writer at a time (a lock in the process, never a hook) */
    uint64_t modules_off;
    uint64_t modules_cap;    /* bytes */
    uint64_t modules_used;   /* bytes of complete records (release) */
    uint64_t modules_lost;   /* records that found no room */
    /* an ALLOC's frame records, claimed by fetch_add from any thread; an
     * ALLOC event's seq in the area names them: bits 0-31 1 + its stack
     * record's index, bits 32-63 1 + its Python record's word offset (0:
     * none) */
    uint64_t stacks_off;     /* stack records (--stacks): stack_depth + 1 words each */
    uint64_t stacks_cap;     /* records */
    uint64_t stacks_next;    /* records claimed (may pass stacks_cap: lost) */
    uint32_t stack_depth;    /* 0: no stacks */
    uint32_t py_depth;       /* Python frames per ALLOC (--python); 0: none.
                                Beside stack_depth: the hook reads both at once */
    /* --python (csrc/trace/pyframes.c) */
    uint64_t py_off;         /* Python records, one after another: only the
                                frames there are take room (page faults cost) */
    uint64_t py_cap;         /* bytes */
    uint64_t py_used;        /* bytes claimed (fetch_add; may pass py_cap) */
    uint64_t py_lost;        /* Python records that found no room */
    uint64_t codes_off;      /* code records (mh_trace_pycode) */
    uint64_t codes_cap;      /* bytes */
    uint64_t codes_used;     /* bytes claimed (fetch_add; past codes_cap: lost) */
    uint64_t codes_lost;     /* code records that found no room */
    uint32_t py_version;     /* the interpreter's PY_VERSION_HEX, 0 none found */
    uint32_t reserved2;
} mh_trace_area;

/* A module record: the header, then the object's path and a NUL, padded
 * to 8 bytes (len counts all of it).  `lo`/`hi` bound its executable
 * segments; addresses map to the file as address - base. */
#define MH_TRACE_MODULE_LOAD 1
#define MH_TRACE_MODULE_UNLOAD 2
typedef struct mh_trace_module {
    uint32_t len;
    uint32_t kind;           /* MH_TRACE_MODULE_* */
    uint64_t ts_ns;          /* CLOCK_MONOTONIC when it was recorded */
    uint64_t base;           /* dlpi_addr */
    uint64_t lo, hi;
} mh_trace_module;           /* 40 bytes, then the path */

/* A stack record: count, then stack_depth return addresses (innermost
 * first: [0] is the event's own caller return address). */
#define MH_TRACE_MODULES_BYTES (1u << 20)
#define MH_TRACE_STACKS_MB 64

/* A Python record: a head word, then its frames (at most py_depth),
 * innermost first, each (code << 32 | (uint32_t)lasti):
 *   code   1 + a code record's offset in the code section / 8; 0: the
 *          frame's code could not be recorded (the section was full, or
 *          it failed a check: its name is unknown, never another's);
 *   lasti  the frame's last instruction, as the interpreter keeps it
 *          (3.9: a byte offset; 3.10+: code units; -1: not started).
 * head: frames (bits 0-15) | MH_TRACE_PY_* (bits 16-23) | MH_TRACE_PY_MORE. */
#define MH_TRACE_PY_MB 64
#define MH_TRACE_PY_DEPTH_MAX 128  /* MEMHOOK_TRACE_PYTHON's bound */
#define MH_TRACE_PY_FRAMES 0u       /* frames of a Python thread (maybe none) */
#define MH_TRACE_PY_NO_THREAD 1u    /* the thread has no Python thread state */
#define MH_TRACE_PY_NO_PYTHON 2u    /* no (initialized) interpreter in the process */
#define MH_TRACE_PY_UNSUPPORTED 3u  /* an interpreter memhook cannot read */
#define MH_TRACE_PY_BROKEN 4u       /* the chain failed a check: frames up to it */
#define MH_TRACE_PY_MORE 0x1000000u /* more frames than py_depth above these */

/* A code record: a code object's identity, written once per code object
 * seen (csrc/trace/pycode.c), so the collector names frames - file,
 * function, line - after the code object is gone.  The header, then the
 * filename, the qualified name and the line table, each padded to 8.
 * Strings are the interpreter's own characters: `kind` bytes each
 * (1: Latin-1, 2: UCS-2, 4: UCS-4; 0: not readable, length 0).  `len`
 * (all of it) is stored last, with release: 0 while being written. */
#define MH_TRACE_CODES_MB 64
typedef struct mh_trace_pycode {
    uint32_t len;
    uint32_t firstlineno;
    uint64_t code;           /* the code object's address when recorded */
    uint64_t filename_obj;   /* the three objects' addresses (the cache's */
    uint64_t qualname_obj;   /*   first check, csrc/trace/pycode.c) */
    uint64_t linetable_obj;
    int64_t filename_hash;   /* the two strings' own cached hashes when */
    int64_t qualname_hash;   /*   recorded (-1: not computed yet) */
    uint32_t filename_len;   /* characters */
    uint32_t qualname_len;
    uint32_t linetable_len;  /* bytes */
    uint8_t filename_kind;
    uint8_t qualname_kind;
    uint8_t flags;           /* MH_TRACE_PYCODE_* */
    uint8_t py_minor;        /* 9..13: how to read the line table */
} mh_trace_pycode;           /* 72 bytes */
#define MH_TRACE_PYCODE_NO_LINES 0x1u /* the line table was not copied (too long) */
/* The most a code record copies (the collector refuses more): a longer
 * name is recorded as unknown, a longer line table as NO_LINES. */
#define MH_TRACE_PYCODE_NAME_MAX 4096     /* characters of a name */
#define MH_TRACE_PYCODE_LINES_MAX 262144  /* bytes of a line table (256 KiB) */

#endif
