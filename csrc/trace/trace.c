/*
 * trace.c - the traced process's half of `memhook trace`.
 *
 * `memhook trace -- CMD` runs CMD with this library in LD_PRELOAD and
 * MEMHOOK_TRACE_SOCKET naming a Unix SOCK_SEQPACKET socket it listens on
 * (trace_proto.h has the wire format).  In every process that inherits
 * them:
 *
 *   constructor  parses MEMHOOK_CUDA_MODE, connects, installs the hooks,
 *                sends HELLO (pid, ppid, exe, cmdline, install result),
 *                sets the queue's sink and starts the streamer thread;
 *   streamer     reads the event queue every MEMHOOK_TRACE_POLL_MS
 *                (default 10 ms; at once while batches come full) with the
 *                queue's tee, which copies events out without consuming
 *                them: a traced process that imports memhook (it binds
 *                this same preloaded core) still drains every event into
 *                its own cache and subscribers;
 *   sink         every batch the tee reads, and every batch a drain takes
 *                out before the tee saw it, goes to the socket: each event
 *                once, in order;
 *   trim         while nothing in the process drains the queue (no
 *                consumer of its own), the streamer drops what it has sent
 *                except the newest TRACE_KEEP events, so a late consumer
 *                still finds those and memory stays bounded;
 *   fork child   threads do not survive fork(): the child opens its own
 *                connection and starts its own streamer; the events it
 *                inherited (the parent's pid) are the parent's to send;
 *   exit         the library destructor and an atexit handler (which
 *                runs after every destructor) drain what is left and send
 *                BYE.  exec'd programs inherit LD_PRELOAD and the
 *                environment and connect on their own.
 *
 * Nothing here runs inside a hook: producers never see the socket.  The
 * sink runs in the draining thread under the queue's consumer lock, which
 * no hook takes, and sends with MSG_NOSIGNAL.  If the collector goes away,
 * streaming stops and the program runs on untraced.  Events recorded after
 * the final drain (another thread still allocating while the process
 * exits) or pending at an exec or _exit are not sent.
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
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cuda_hooks.h"
#include "log.h"
#include "trace_proto.h"

_Static_assert(sizeof(mh_trace_header) == 16, "trace header layout");
_Static_assert(sizeof(mh_trace_hello) == 48, "trace hello layout");
_Static_assert(sizeof(memhook_event) == 64, "event layout");

/* Events a traced process with no consumer of its own keeps after sending
 * them (4 MiB of events), for a consumer that starts later. */
#define TRACE_KEEP 65536

#define EXE_MAX 1024
#define CMDLINE_MAX 2048
#define WHY_MAX 512

/* The trace state of this process.  Process-wide: one connection per
 * process is what the collector counts processes by. */
static struct {
    pthread_mutex_t send_lock;  /* serialises sends; taken under the queue's
                                   consumer lock by the sink, alone by BYE */
    bool enabled;               /* MEMHOOK_TRACE_SOCKET was set and valid */
    _Atomic int fd;             /* -1: not streaming */
    dev_t dev;                  /* identity of fd, checked before each send: */
    ino_t ino;                  /*   the program may close or reuse it */
    int32_t pid;                /* events of other pids are not ours to send */
    uint64_t sent;
    unsigned mode;
    int install_rc;
    char why[WHY_MAX];
    struct sockaddr_un addr;
    unsigned poll_ms;
    _Atomic int stop;
} t = {.send_lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool fd_is_ours(int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == t.dev && st.st_ino == t.ino;
}

/* send_lock held.  Streaming stops for good; the program goes on. */
static void lose_collector(const char *what, int err)
{
    int fd = atomic_exchange(&t.fd, -1);
    if (fd < 0)
        return;
    if (err == EBADF || !fd_is_ours(fd))
        mh_warn("memhook trace: pid %d closed or replaced the collector's socket; "
                "its events are no longer traced", (int)t.pid);
    else {
        mh_warn("memhook trace: pid %d lost the collector (%s: %s); its events are no "
                "longer traced", (int)t.pid, what, strerror(err));
        close(fd);
    }
    mh_queue_set_sink(NULL);
}

/* send_lock held.  One message: header + iov[0..n). */
static bool send_message(uint16_t type, uint32_t count, const struct iovec *parts, int nparts)
{
    int fd = atomic_load(&t.fd);
    if (fd < 0)
        return false;
    if (!fd_is_ours(fd)) {
        lose_collector("descriptor", EBADF);
        return false;
    }
    mh_trace_header h = {.magic = MH_TRACE_MAGIC, .version = MH_TRACE_VERSION, .type = type,
                         .count = count};
    struct iovec iov[5];
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof h;
    for (int i = 0; i < nparts && i < 4; i++)
        iov[i + 1] = parts[i];
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)(nparts + 1)};
    for (;;) {
        if (sendmsg(fd, &m, MSG_NOSIGNAL) >= 0)
            return true;
        if (errno != EINTR) {
            lose_collector("send", errno);
            return false;
        }
    }
}

/* The queue's sink: under the queue's consumer lock, in the draining thread. */
static void trace_sink(const memhook_event *ev, size_t n)
{
    pthread_mutex_lock(&t.send_lock);
    size_t i = 0;
    while (i < n && atomic_load(&t.fd) >= 0) {
        if (ev[i].pid != t.pid) {  /* recorded before fork(), by the parent */
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && j - i < MH_TRACE_BATCH && ev[j].pid == t.pid)
            j++;
        struct iovec part = {.iov_base = (void *)&ev[i], .iov_len = (j - i) * sizeof *ev};
        if (send_message(MH_TRACE_EVENTS, (uint32_t)(j - i), &part, 1))
            t.sent += j - i;
        i = j;
    }
    pthread_mutex_unlock(&t.send_lock);
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

/* A fresh connection, or false.  Called with no other trace thread alive
 * (constructor, fork child). */
static bool connect_collector(void)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mh_warn("memhook trace: socket: %s", strerror(errno));
        return false;
    }
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)&t.addr, sizeof t.addr);
    while (rc != 0 && errno == EINTR);
    struct stat st;
    if (rc != 0 || fstat(fd, &st) != 0) {
        mh_debug("memhook trace: cannot connect to %s: %s", t.addr.sun_path, strerror(errno));
        close(fd);
        return false;
    }
    t.dev = st.st_dev;
    t.ino = st.st_ino;
    t.pid = (int32_t)getpid();
    t.sent = 0;
    atomic_store(&t.fd, fd);
    return true;
}

static void send_hello(uint32_t flags)
{
    char exe[EXE_MAX], cmdline[CMDLINE_MAX];
    ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof exe);
    if (exe_len < 0)
        exe_len = 0;
    size_t cmd_len = read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
    size_t why_len = strnlen(t.why, sizeof t.why);
    mh_trace_hello hello = {
        .pid = (int32_t)getpid(),
        .ppid = (int32_t)getppid(),
        .mode = t.mode,
        .install_rc = t.install_rc,
        .core_version = (uint32_t)memhook_version_number(),
        .flags = flags,
        .start_ns = now_ns(),
        .exe_len = (uint32_t)exe_len,
        .cmdline_len = (uint32_t)cmd_len,
        .why_len = (uint32_t)why_len,
    };
    struct iovec parts[4] = {
        {.iov_base = &hello, .iov_len = sizeof hello},
        {.iov_base = exe, .iov_len = (size_t)exe_len},
        {.iov_base = cmdline, .iov_len = cmd_len},
        {.iov_base = t.why, .iov_len = why_len},
    };
    pthread_mutex_lock(&t.send_lock);
    send_message(MH_TRACE_HELLO, 0, parts, 4);
    pthread_mutex_unlock(&t.send_lock);
}

static void *streamer_main(void *arg)
{
    (void)arg;
    /* One streamer per process; only it uses this buffer (a fork child's
     * new streamer inherits a copy of it, not a user). */
    static memhook_event buf[MH_TRACE_BATCH];
    struct timespec pause = {.tv_sec = t.poll_ms / 1000,
                             .tv_nsec = (long)(t.poll_ms % 1000) * 1000000L};
    while (!atomic_load(&t.stop) && atomic_load(&t.fd) >= 0) {
        /* The sink sends what the tee reads; the copy in buf is not needed.
         * Full batches mean more is waiting: no pause then. */
        size_t n = mh_queue_tee(buf, MH_TRACE_BATCH);
        mh_queue_trim(TRACE_KEEP);
        if (n < MH_TRACE_BATCH)
            nanosleep(&pause, NULL);
    }
    return NULL;
}

static void start_streamer(void)
{
    /* The program's signals must never be delivered to our thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t thread;
    int rc = pthread_create(&thread, &attr, streamer_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        mh_warn("memhook trace: pid %d cannot start its streamer thread (%s); events are "
                "sent when the program drains them or exits", (int)getpid(), strerror(rc));
        return;
    }
    pthread_setname_np(thread, "memhook-trace");
}

static void begin_streaming(uint32_t hello_flags)
{
    if (!connect_collector())
        return;
    send_hello(hello_flags);
    mh_queue_set_sink(trace_sink);
    start_streamer();
}

/* Send what is left and say goodbye.  Runs twice at exit (destructor,
 * then atexit); each BYE carries the count so far. */
static void trace_flush(void)
{
    if (!t.enabled || atomic_load(&t.fd) < 0)
        return;
    atomic_store(&t.stop, 1);
    static memhook_event buf[MH_TRACE_BATCH];
    static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;  /* two exiting threads */
    pthread_mutex_lock(&buf_lock);
    while (mh_queue_tee(buf, MH_TRACE_BATCH) == MH_TRACE_BATCH) {
    }
    pthread_mutex_unlock(&buf_lock);
    pthread_mutex_lock(&t.send_lock);
    mh_trace_bye bye = {.events_sent = t.sent};
    struct iovec part = {.iov_base = &bye, .iov_len = sizeof bye};
    send_message(MH_TRACE_BYE, 0, &part, 1);
    pthread_mutex_unlock(&t.send_lock);
}

static void trace_atexit(void) { trace_flush(); }

static void trace_fork_child(void)
{
    /* Only this thread survived: the streamer is gone and no send is in
     * progress (sends happen under the queue's consumer lock, which fork
     * holds).  The inherited descriptor is the parent's connection. */
    pthread_mutex_init(&t.send_lock, NULL);
    int fd = atomic_exchange(&t.fd, -1);
    if (!t.enabled)
        return;
    if (fd_is_ours(fd))
        close(fd);
    atomic_store(&t.stop, 0);
    begin_streaming(MH_TRACE_HELLO_FORKED);
}

static unsigned poll_interval_ms(void)
{
    const char *v = getenv("MEMHOOK_TRACE_POLL_MS");
    if (v == NULL || *v == '\0')
        return 10;
    char *end;
    long ms = strtol(v, &end, 10);
    if (*end != '\0' || ms < 1 || ms > 1000) {
        mh_warn("memhook trace: MEMHOOK_TRACE_POLL_MS=%s is not 1-1000; using 10", v);
        return 10;
    }
    return (unsigned)ms;
}

/* Runs after the queue's constructors (cuda/ objects come before trace/
 * ones on the link line, and .init_array runs in link order), so the
 * queue's atfork handlers are registered before ours and its fork repair
 * runs before our child handler starts a new streamer. */
__attribute__((constructor)) static void trace_init(void)
{
    const char *path = getenv("MEMHOOK_TRACE_SOCKET");
    if (path == NULL || *path == '\0')
        return;
    if (strlen(path) >= sizeof t.addr.sun_path) {
        mh_warn("memhook trace: MEMHOOK_TRACE_SOCKET is longer than %zu bytes; not tracing",
                sizeof t.addr.sun_path - 1);
        return;
    }
    t.addr.sun_family = AF_UNIX;
    memcpy(t.addr.sun_path, path, strlen(path) + 1);
    t.poll_ms = poll_interval_ms();
    /* Connect first: a process the collector will never hear from is left
     * alone, hooks and all. */
    if (!connect_collector())
        return;
    t.enabled = true;
    t.install_rc = memhook_mode_parse(getenv("MEMHOOK_CUDA_MODE"), &t.mode, t.why, sizeof t.why);
    if (t.install_rc == 0)
        t.install_rc = memhook_hooks_install(t.mode, t.why, sizeof t.why);
    else
        t.mode = 0;
    send_hello(0);
    mh_queue_set_sink(trace_sink);
    pthread_atfork(NULL, NULL, trace_fork_child);
    atexit(trace_atexit);
    start_streamer();
}

__attribute__((destructor)) static void trace_fini(void) { trace_flush(); }
