/*
 * trace.c - the traced process's half of `memhook trace`.
 *
 * `memhook trace -- CMD` runs CMD with this library in LD_PRELOAD and
 * MEMHOOK_TRACE_SOCKET naming the collector's Unix SOCK_SEQPACKET socket
 * (trace_proto.h).  In every process image that inherits them:
 *
 *   load         makes the image's trace area (trace_lane.c: a memfd the
 *                hooks copy every event into) and connects; the hook layer
 *                installs the hooks (csrc/cuda/startup_order.c); HELLO goes
 *                out with the memfd, and both descriptors are closed: from
 *                then on the collector reads the area on its own;
 *   fork child   makes its own area and hands it over from the atfork
 *                child handler; the parent's fork() connects for it first
 *                (a "hold": mh_trace_fork_prepare);
 *   spawn/vfork  the child is announced by EXPECT (mh_trace_expect), since
 *                it runs no fork handler; popen's too (trace_popen.c);
 *   streamer     a thread that refreshes the area's clock anchor, retries a
 *                hand-over the collector could not take yet and bounds the
 *                process's own queue; started by the image's first event,
 *                not at load (a program that changes per-thread
 *                credentials must stay single-threaded);
 *   exit         marks the area exited and writes a last anchor.
 *
 * Never blocking: every socket call is non-blocking, none is made under a
 * lock a hook or fork() takes, and the hooks only copy into shared memory
 * (EXPECT's bounded connect is the one wait, outside any hook).
 * docs/design/trace-children.md has the reasons: how children are
 * followed, the credentials, what a stalled collector costs.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "mh_options.h"
#include "mh_text.h"
#include "mh_thread.h"
#include "mh_time.h"
#include "pyframes.h"
#include "queue.h"
#include "trace_exec.h"
#include "trace_lane.h"
#include "trace_proto.h"

_Static_assert(sizeof(mh_trace_header) == 16, "trace header layout");
_Static_assert(sizeof(mh_trace_hello) == 48, "trace hello layout");
_Static_assert(sizeof(memhook_event) == 64, "event layout");

/* Events a traced process with no consumer of its own keeps in its own
 * queue (4 MiB), for a consumer that starts later.  The trace itself does
 * not need them: it has its own copy in the area. */
#define TRACE_KEEP 65536

#define EXE_MAX 1024
#define CMDLINE_MAX 2048
#define WHY_MAX 512

/* The trace state of this process image.  Process-wide: one area and one
 * hand-over per image is what the collector counts processes by. */
static struct {
    bool enabled;                /* MEMHOOK_TRACE_SOCKET was set and valid */
    pid_t pid;                   /* the process this image's HELLO is for */
    pthread_mutex_t hand_lock;   /* streamer vs exit handing the area over; a leaf
                                  * of the lock order (csrc/core/mh_lock_order.h) */
    int area_fd;                 /* -1 once handed over (or given up) */
    dev_t dev;                   /* identity of area_fd: the program may */
    ino_t ino;                   /*   close or reuse it before hand-over */
    int sock;                    /* a connection not yet used, or -1 */
    int fork_hold;               /* prepare -> parent/child: the child's hold, or -1 */
    int held;                    /* a fork child's hold until its HELLO is out, or -1 */
    dev_t held_dev;              /* identity of held: the program may close */
    ino_t held_ino;              /*   or reuse it first */
    unsigned testing_fork_delay_ms;  /* MEMHOOK_TESTING_TRACE_FORK_DELAY_MS */
    uint32_t hello_flags;
    unsigned mode;               /* HELLO's account of the install at load */
    int install_rc;
    char why[WHY_MAX];
    struct sockaddr_un addr;
    unsigned poll_ms;
    unsigned buffer_mb;
    unsigned stack_depth;        /* MEMHOOK_TRACE_STACKS: frames per ALLOC, 0 off */
    unsigned py_depth;           /* MEMHOOK_TRACE_PYTHON: Python frames per ALLOC, 0 off */
    int connect_errno;           /* why the last connect failed */
    _Atomic int streamer;        /* 1 once this image's streamer was started */
    _Atomic int stop;
} t = {.hand_lock = PTHREAD_MUTEX_INITIALIZER, .area_fd = -1, .sock = -1, .fork_hold = -1,
       .held = -1};

static void start_streamer(void);

const char *mh_trace_socket_path(void)
{
    return t.enabled ? t.addr.sun_path : NULL;
}

static bool fd_is(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

static size_t read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got;
}

enum { CONNECTED, TRY_LATER, NO_COLLECTOR };

/* A non-blocking connection in t.sock.  A Unix connect completes at once
 * or fails: EAGAIN when the collector's listen queue is full. */
static int connect_collector(void)
{
    if (t.sock >= 0)
        return CONNECTED;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        mh_warn("memhook trace: socket: %s", strerror(errno));
        return TRY_LATER;
    }
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)&t.addr, sizeof t.addr);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        int err = errno;
        close(fd);
        t.connect_errno = err;
        mh_debug("memhook trace: cannot connect to %s: %s", t.addr.sun_path, strerror(err));
        return err == EAGAIN || err == EWOULDBLOCK ? TRY_LATER : NO_COLLECTOR;
    }
    t.sock = fd;
    return CONNECTED;
}

static void give_up_area(void)
{
    if (fd_is(t.area_fd, t.dev, t.ino))
        close(t.area_fd);
    t.area_fd = -1;
}

/* HELLO with the area's memfd.  hand_lock held (or no other thread). */
static int send_hello(void)
{
    char exe[EXE_MAX], cmdline[CMDLINE_MAX];
    ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof exe);
    if (exe_len < 0)
        exe_len = 0;
    size_t cmd_len = read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
    size_t why_len = strnlen(t.why, sizeof t.why);
    mh_trace_header h = {.magic = MH_TRACE_MAGIC, .version = MH_TRACE_VERSION,
                         .type = MH_TRACE_HELLO};
    mh_trace_hello hello = {
        .pid = (int32_t)getpid(),
        .ppid = (int32_t)getppid(),
        .mode = t.mode,
        .install_rc = t.install_rc,
        .core_version = (uint32_t)memhook_version_number(),
        .flags = t.hello_flags,
        .start_ns = mh_monotonic_ns(),
        .exe_len = (uint32_t)exe_len,
        .cmdline_len = (uint32_t)cmd_len,
        .why_len = (uint32_t)why_len,
    };
    struct iovec iov[5] = {
        {.iov_base = &h, .iov_len = sizeof h},
        {.iov_base = &hello, .iov_len = sizeof hello},
        {.iov_base = exe, .iov_len = (size_t)exe_len},
        {.iov_base = cmdline, .iov_len = cmd_len},
        {.iov_base = t.why, .iov_len = why_len},
    };
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 5, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &t.area_fd, sizeof(int));
    for (;;) {
        if (sendmsg(t.sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
            return CONNECTED;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS ? TRY_LATER
                                                                           : NO_COLLECTOR;
    }
}

/* The child's hold, once its HELLO is out or will never be: from now on
 * its pidfd (or its end) is what the collector waits for. */
static void release_hold(void)
{
    if (t.held >= 0 && fd_is(t.held, t.held_dev, t.held_ino))
        close(t.held);
    t.held = -1;
}

/* Hand the area over if it is not yet; never waits.  hand_lock held (or
 * no other thread).  False: try again later. */
static bool hand_over(void)
{
    if (t.area_fd < 0) {
        release_hold();
        return true;
    }
    if (!fd_is(t.area_fd, t.dev, t.ino)) {
        mh_warn("memhook trace: pid %d closed its trace area's descriptor before the "
                "collector could take it; its events are not traced", (int)getpid());
        t.area_fd = -1;
        return true;
    }
    int rc = connect_collector();
    if (rc == CONNECTED)
        rc = send_hello();
    if (rc == TRY_LATER)
        return false;
    if (t.sock >= 0) {
        /* The program may have closed or reused it since the connect. */
        close(t.sock);
        t.sock = -1;
    }
    if (rc == NO_COLLECTOR)
        mh_warn("memhook trace: pid %d cannot reach the collector at %s; its events are "
                "not traced", (int)getpid(), t.addr.sun_path);
    give_up_area();
    release_hold();
    return true;
}

/* Events the streamer tees per call (16 pages of them). */
#define TEE_BATCH 1024

static void *streamer_main(void *arg)
{
    (void)arg;
    /* One streamer per process; only it uses this buffer (a fork child's
     * new streamer inherits a copy of it, not a user). */
    static memhook_event buf[TEE_BATCH];
    struct timespec pause = {.tv_sec = t.poll_ms / 1000,
                             .tv_nsec = (long)(t.poll_ms % 1000) * 1000000L};
    while (!atomic_load(&t.stop)) {
        /* The tee marks what the trim may drop; the copy in buf is not
         * needed (the trace has its own in the area). */
        while (mh_queue_tee(buf, TEE_BATCH) == TEE_BATCH) {
        }
        mh_queue_trim(TRACE_KEEP);
        mh_trace_modules_poll();  /* objects loaded or unloaded without dlopen's wrapper */
        mh_trace_area_anchor();
        if (pthread_mutex_trylock(&t.hand_lock) == 0) {
            hand_over();
            pthread_mutex_unlock(&t.hand_lock);
        }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Not at load (see "credentials" at the top); from the first claim of a
 * segment, a slow path of the hooks (once per 256 events a thread), once
 * per image.  The hooks take no lock of memhook's for it; pthread_create
 * takes glibc's own (its stack cache, the TLS lock, both safe from any
 * thread that holds none of them, as a hook does). */
void mh_trace_want_streamer(void)
{
    int expect = 0;
    if (atomic_load_explicit(&t.streamer, memory_order_relaxed) != 0 ||
        !atomic_compare_exchange_strong(&t.streamer, &expect, 1))
        return;
    start_streamer();
}

static void start_streamer(void)
{
    int rc = mh_thread_start_quiet(streamer_main, "memhook-trace");
    if (rc != 0)
        mh_warn("memhook trace: pid %d cannot start its streamer thread (%s); its own "
                "queue is not trimmed", (int)getpid(), strerror(rc));
}

/* A fresh area in t.area_fd; false (and a warning) if none could be made. */
static bool new_area(void)
{
    int fd = mh_trace_area_create(t.buffer_mb, t.stack_depth, t.py_depth);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        mh_warn("memhook trace: pid %d cannot make its trace area (%u MiB): %s; its "
                "events are not traced", (int)getpid(), t.buffer_mb, strerror(errno));
        if (fd >= 0)
            close(fd);
        mh_trace_area_forget();
        return false;
    }
    mh_trace_modules_sync();  /* every object loaded now, in the new area */
    if (t.py_depth != 0)
        mh_pyframes_area_ready(mh_trace_area_current());
    t.area_fd = fd;
    t.dev = st.st_dev;
    t.ino = st.st_ino;
    return true;
}

static void trace_exit(void)
{
    if (!t.enabled)
        return;
    mh_trace_area_anchor();
    mh_trace_area_mark_exited();
    /* One last non-blocking try if the area is still ours alone. */
    if (pthread_mutex_trylock(&t.hand_lock) == 0) {
        hand_over();
        pthread_mutex_unlock(&t.hand_lock);
    }
}

/* Tests only (MEMHOOK_TESTING_TRACE_*_DELAY_MS): a process run late. */
static void sleep_ms(unsigned ms)
{
    struct timespec d = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
}

/* A fork child says HELLO from its atfork handler, but only once it runs:
 * a parent that exits first (`sh -c 'job & exit'`) could leave the
 * collector with no image and no connection, and the trace would end
 * without the child.  So, before the fork, the parent connects for the
 * child (a "hold"), and the child inherits it: the collector counts a
 * connection that has said nothing as a process still to come, and waits
 * until it says HELLO or is closed - by the child, once its own HELLO is
 * out, or by the kernel when the child ends or execs (close-on-exec: the
 * child's handler has run by then, its pidfd is the collector's).  The
 * parent's copy is closed before fork() returns to it.  Only system calls
 * here (socket, connect, close, fstat): fork() may be called from a signal
 * handler.  Best effort: a full listen queue or no descriptor leaves the
 * child as it was, announced by its own HELLO alone.  No lock: glibc runs
 * the handlers of one fork() at a time. */
void mh_trace_fork_prepare(void)
{
    t.fork_hold = -1;
    if (!t.enabled)
        return;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return;
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)&t.addr, sizeof t.addr);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        close(fd);
        return;
    }
    t.fork_hold = fd;
}

void mh_trace_fork_parent(void)
{
    if (t.fork_hold >= 0)
        close(t.fork_hold);
    t.fork_hold = -1;
}

void mh_trace_fork_child(void)
{
    if (!t.enabled)
        return;
    if (t.testing_fork_delay_ms != 0)
        sleep_ms(t.testing_fork_delay_ms);  /* tests only: a child the scheduler runs late */
    /* A hold of the parent's own fork, if any, is no longer wanted; this
     * fork's is the child's until its HELLO is out. */
    if (t.held >= 0 && fd_is(t.held, t.held_dev, t.held_ino) && t.held != t.fork_hold)
        close(t.held);
    t.held = -1;
    struct stat st;
    if (t.fork_hold >= 0 && fstat(t.fork_hold, &st) == 0) {
        t.held = t.fork_hold;
        t.held_dev = st.st_dev;
        t.held_ino = st.st_ino;
    }
    t.fork_hold = -1;
    /* Only this thread survived.  Whatever trace descriptors were still
     * open are the parent's: its area (not mapped here) and connection. */
    mh_trace_area_forget();
    pthread_mutex_init(&t.hand_lock, NULL);
    if (t.sock >= 0)
        close(t.sock);
    t.sock = -1;
    give_up_area();
    atomic_store(&t.stop, 0);
    atomic_store(&t.streamer, 0);  /* the parent's is not here; the child's first event starts one */
    t.hello_flags = MH_TRACE_HELLO_FORKED;
    t.pid = getpid();
    if (new_area() && !hand_over())
        mh_trace_want_streamer();  /* a hand-over to retry */
}

/* How long an EXPECT waits for room in the collector's listen queue: it
 * must not be lost, and the process it announces waits meanwhile (a vfork
 * parent, or the child the spawn made, which is exec'ing). */
#define EXPECT_WAIT_MS 1000

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434 /* (one number on every architecture) */
#endif

int mh_trace_pidfd_open(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);  /* (close-on-exec) */
}

/* Only system calls and the stack, errno kept: this may run in a vfork
 * child (trace_exec.h), whose writes to `t` would be its parent's. */
void mh_trace_expect_pidfd(int pidfd)
{
    if (pidfd < 0)
        return;
    int saved = errno;
    int fd = t.enabled ? socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0) : -1;
    if (fd >= 0) {
        /* A Unix connect waits for room in the listen queue up to SO_SNDTIMEO. */
        struct timeval wait = {.tv_sec = EXPECT_WAIT_MS / 1000,
                               .tv_usec = (EXPECT_WAIT_MS % 1000) * 1000};
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, sizeof wait);
        int rc;
        do
            rc = connect(fd, (const struct sockaddr *)&t.addr, sizeof t.addr);
        while (rc != 0 && errno == EINTR);
        if (rc == 0) {
            mh_trace_header h = {.magic = MH_TRACE_MAGIC, .version = MH_TRACE_VERSION,
                                 .type = MH_TRACE_EXPECT};
            struct iovec iov = {.iov_base = &h, .iov_len = sizeof h};
            union {
                struct cmsghdr align;
                char buf[CMSG_SPACE(sizeof(int))];
            } control;
            memset(&control, 0, sizeof control);
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                               .msg_controllen = sizeof control.buf};
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &pidfd, sizeof(int));
            while (sendmsg(fd, &m, MSG_NOSIGNAL) < 0 && errno == EINTR) {
            }
        }
        close(fd);
    }
    close(pidfd);
    errno = saved;
}

void mh_trace_expect(pid_t pid)
{
    if (!t.enabled || pid <= 0)
        return;
    int saved = errno;
    int pidfd = mh_trace_pidfd_open(pid);
    errno = saved;
    mh_trace_expect_pidfd(pidfd);
}

bool mh_trace_exec_needs_expect(void)
{
    return t.enabled && getpid() != t.pid;
}

static unsigned env_number(const char *name, const char *v, unsigned dflt, unsigned lo,
                           unsigned hi)
{
    if (v == NULL || *v == '\0')
        return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < (long)lo || n > (long)hi) {
        mh_warn("memhook trace: %s=%s is not %u-%u; using %u", name, v, lo, hi, dflt);
        return dflt;
    }
    return (unsigned)n;
}

/* The first half of the load (csrc/cuda/startup_order.c, after the fork
 * handlers are registered: our child handler runs after the queue's and
 * the hooks' repair).  True when this image is traced: its area is made
 * and the hooks may go in, before mh_trace_hello_at_load hands it over. */
bool mh_trace_open_at_load(void)
{
    const char *path = mh_opts.trace_socket;
    if (path == NULL || *path == '\0')
        return false;
    if (strlen(path) >= sizeof t.addr.sun_path) {
        mh_warn("memhook trace: MEMHOOK_TRACE_SOCKET is longer than %zu bytes; not tracing",
                sizeof t.addr.sun_path - 1);
        return false;
    }
    t.addr.sun_family = AF_UNIX;
    memcpy(t.addr.sun_path, path, strlen(path) + 1);
    t.poll_ms = env_number("MEMHOOK_TRACE_POLL_MS", mh_opts.trace_poll_ms, 10, 1, 1000);
    t.stack_depth = env_number("MEMHOOK_TRACE_STACKS", mh_opts.trace_stacks, 0, 0, 128);
    t.py_depth = env_number("MEMHOOK_TRACE_PYTHON", mh_opts.trace_python, 0, 0,
                            MH_TRACE_PY_DEPTH_MAX);
    t.testing_fork_delay_ms = env_number("MEMHOOK_TESTING_TRACE_FORK_DELAY_MS",
                                         mh_opts.testing_trace_fork_delay_ms, 0, 0, 10000);
    t.buffer_mb = env_number("MEMHOOK_TRACE_BUFFER_MB", mh_opts.trace_buffer_mb,
                             MH_TRACE_BUFFER_MB_DEFAULT, 4, 4096);
    unsigned load_delay_ms = env_number("MEMHOOK_TESTING_TRACE_LOAD_DELAY_MS",
                                        mh_opts.testing_trace_load_delay_ms, 0, 0, 10000);
    if (load_delay_ms != 0)
        sleep_ms(load_delay_ms);  /* tests only: an image the loader runs late */
    /* Connect first: a process the collector will never hear from is left
     * alone, hooks and all.  (A full listen queue is not that: retried.) */
    if (connect_collector() == NO_COLLECTOR) {
        if (t.connect_errno == EACCES || t.connect_errno == EPERM)
            mh_warn("memhook trace: pid %d runs as uid %u, and only the user who started "
                    "`memhook trace` may connect to its collector (%s: %s): this process "
                    "is not traced", (int)getpid(), (unsigned)geteuid(), t.addr.sun_path,
                    strerror(t.connect_errno));
        return false;
    }
    /* Observers (a step of the load) before install tells of objects. */
    if (t.stack_depth != 0)
        mh_text_watch();  /* --stacks ends its walks outside code */
    if (t.py_depth != 0)
        mh_pyframes_watch();
    if (!new_area()) {
        if (t.sock >= 0)
            close(t.sock);
        t.sock = -1;
        return false;
    }
    t.pid = getpid();
    t.enabled = true;
    return true;
}

/* The second half: HELLO says how the install went (`mode` installed, or 0
 * with `install_rc` and `why` from a refused MEMHOOK_CUDA_MODE or a failed
 * install), and the area is handed over. */
void mh_trace_hello_at_load(unsigned mode, int install_rc, const char *why)
{
    if (!t.enabled)
        return;
    t.mode = mode;
    t.install_rc = install_rc;
    size_t n = why != NULL ? strnlen(why, sizeof t.why - 1) : 0;
    if (n != 0)
        memcpy(t.why, why, n);
    t.why[n] = '\0';
    bool handed = hand_over();
    atexit(trace_exit);
    if (!handed)
        mh_trace_want_streamer();  /* a hand-over to retry; else the first event starts it */
}

void mh_trace_at_unload(void) { trace_exit(); }
