/*
 * trace_proto.h - the wire format between a traced process and the
 * `memhook trace` collector (memhook/cli/protocol.py mirrors it; a test
 * compares the two).
 *
 * Transport: one AF_UNIX SOCK_SEQPACKET connection per traced process to
 * the path in MEMHOOK_TRACE_SOCKET.  SEQPACKET keeps message boundaries and
 * order, so every message is one header followed by its payload, read with
 * one recv.  Integers are the host's (little-endian x86-64) byte order;
 * both ends run on the same machine.
 *
 *   HELLO   first message of a connection: who this process is
 *           (mh_trace_hello, then exe, cmdline and why bytes)
 *   EVENTS  `count` memhook_event records (64 bytes each, memhook.h)
 *   BYE     the process reached exit(): mh_trace_bye (may come twice, from
 *           the library destructor and from atexit; the last one counts)
 *
 * A connection that ends without BYE belongs to a process that exec'd
 * (the new program connects again with the same pid) or was killed.
 */
#ifndef MEMHOOK_TRACE_PROTO_H
#define MEMHOOK_TRACE_PROTO_H

#include <stdint.h>

#define MH_TRACE_MAGIC 0x3154484Du /* "MHT1" */
#define MH_TRACE_VERSION 1

#define MH_TRACE_HELLO 1
#define MH_TRACE_EVENTS 2
#define MH_TRACE_BYE 3

/* Most events in one EVENTS message: 64 KiB of events, well inside the
 * default socket send buffer (a SEQPACKET message must fit in it whole). */
#define MH_TRACE_BATCH 1024

/* mh_trace_hello.flags */
#define MH_TRACE_HELLO_FORKED 0x1u /* a fork() child of a traced process */

typedef struct mh_trace_header {
    uint32_t magic;    /* MH_TRACE_MAGIC */
    uint16_t version;  /* MH_TRACE_VERSION */
    uint16_t type;     /* MH_TRACE_HELLO / _EVENTS / _BYE */
    uint32_t count;    /* EVENTS: how many events follow; else 0 */
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

typedef struct mh_trace_bye {
    uint64_t events_sent;  /* every event this process sent on this connection */
} mh_trace_bye;

#endif
