/*
 * text_poke.c - writing live code that other threads may be executing.
 *
 * The int3 protocol, run once for a whole batch of patch windows, in
 * bounded time: it never waits for a thread to leave a window.  The
 * protocol is generic; the bytes, registers and jump forms it names are
 * x86-64's and come from arch.h.  mh_text_poke_batch runs its steps in
 * order, one static function each:
 *
 *   0. signals_plan: which barrier each window gets (int3, or "jmp ." beside
 *      a thread that blocks SIGTRAP) and which probe signal to send;
 *   1. pages_make_writable: every page R+W+X once (W^X: nothing written);
 *   2. barriers_store: a barrier at every window's byte 0; sync cores;
 *   3. threads_recheck, threads_move_out: a probe moves each thread that
 *      stands inside a window to the same place in the trampoline; a thread
 *      that cannot hear it must be parked outside every window, else the
 *      windows with a boundary inside are refused;
 *   4. windows_write: bytes 1.., sync, every byte 0, sync;
 *   5. pages_restore.
 *
 * Why it is safe: a store to byte 0 is one byte, so a fetch sees the old or
 * the new byte; bytes 1.. change only behind a barrier, once no thread can
 * stand inside.  "Sync cores" is membarrier's SYNC_CORE, else a protection
 * downgrade whose TLB-flush IPIs serialise every CPU (mh_sync_cores).  The
 * handlers are async-signal-safe.  docs/design/live-patching.md states
 * each step, the residual races and the hardware it rests on.
 */
#include "bistro.h"
#include "mh_time.h"
#include "procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* ---- sync cores --------------------------------------------------------- */

/* How this process syncs cores: probed once (membarrier registration is
 * per process), read under the install mutex. */
enum { SYNC_UNKNOWN, SYNC_MEMBARRIER, SYNC_TLB };
static int g_sync_mode = SYNC_UNKNOWN;
static volatile uint8_t *g_flush_page;

static long membarrier(int cmd)
{
    return syscall(SYS_membarrier, cmd, 0, 0);
}

void mh_sync_cores(void)
{
    if (g_sync_mode == SYNC_UNKNOWN)
        g_sync_mode = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE) == 0
                          ? SYNC_MEMBARRIER : SYNC_TLB;
    if (g_sync_mode == SYNC_MEMBARRIER) {
        if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0)
            return;
        /* EPERM: not registered in this mm (a forked child): register again. */
        if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE) == 0 &&
            membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) == 0)
            return;
        g_sync_mode = SYNC_TLB;
    }
    /* Fallback (see the file comment): a protection downgrade of a present
     * page IPIs every CPU of this mm. */
    long ps = sysconf(_SC_PAGESIZE);
    if (!g_flush_page) {
        void *p = mmap(NULL, (size_t)ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return;
        g_flush_page = p;
    }
    g_flush_page[0] = 1; /* make the PTE present and writable */
    mprotect((void *)g_flush_page, (size_t)ps, PROT_READ);
    mprotect((void *)g_flush_page, (size_t)ps, PROT_READ | PROT_WRITE);
}

/* ---- SIGTRAP: int3 redirects; the probe: moving threads out ------------- */

#define MH_TRAP_SITES 4096
#define QUIESCE_MAGIC 0x6d68626bULL /* "mhbk" */

/* Process-wide, lock-free table the signal handlers read: a handler runs
 * on any thread at any time and can take no lock.  Entries are only added
 * (under the install mutex); an entry's fields are written before `at` is
 * published with a release store, and rewritten only when the same window
 * gets a new trampoline (the old bytes changed under us). */
typedef struct trap_site {
    _Atomic uint64_t at;
    _Atomic uint64_t tramp;
    _Atomic uint64_t map_lo, map_hi; /* mh_plan.map, 16 bytes */
    _Atomic uint64_t dest;           /* the 12-byte form's movabs immediate */
    _Atomic int len;
} trap_site;
static trap_site g_sites[MH_TRAP_SITES];
static _Atomic int g_nsites;

static struct {
    _Atomic uint32_t round;
    _Atomic int acks;
    _Atomic int stuck;       /* a thread inside a window, not on a boundary */
    _Atomic uint64_t stuck_at;
} g_q;

static struct sigaction g_prev;

int mh_trap_register(uint64_t at, uint64_t tramp, int len, const uint8_t map[16], uint64_t dest)
{
    uint64_t lo, hi;
    memcpy(&lo, map, 8);
    memcpy(&hi, map + 8, 8);
    int n = atomic_load_explicit(&g_nsites, memory_order_acquire);
    int slot = -1;
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&g_sites[i].at, memory_order_relaxed) == at &&
            atomic_load_explicit(&g_sites[i].len, memory_order_relaxed) == len)
            slot = i;
    trap_site *t;
    if (slot >= 0) {
        t = &g_sites[slot];
        /* The same window and trampoline: nothing to change (the entry is
         * read by handlers at any time, so it is only rewritten when the
         * old bytes changed under us and the trampoline with them). */
        if (atomic_load_explicit(&t->tramp, memory_order_relaxed) == tramp &&
            (!dest || atomic_load_explicit(&t->dest, memory_order_relaxed) == dest))
            return 0;
    } else {
        if (n >= MH_TRAP_SITES)
            return ENOMEM;
        t = &g_sites[n];
    }
    atomic_store_explicit(&t->tramp, tramp, memory_order_relaxed);
    atomic_store_explicit(&t->map_lo, lo, memory_order_relaxed);
    atomic_store_explicit(&t->map_hi, hi, memory_order_relaxed);
    if (dest)
        atomic_store_explicit(&t->dest, dest, memory_order_relaxed);
    atomic_store_explicit(&t->len, len, memory_order_release);
    if (slot < 0) {
        atomic_store_explicit(&t->at, at, memory_order_release);
        atomic_store_explicit(&g_nsites, n + 1, memory_order_release);
    }
    return 0;
}

static void chain(int sig, siginfo_t *si, void *ctx)
{
    if (g_prev.sa_flags & SA_SIGINFO) {
        if (g_prev.sa_sigaction)
            g_prev.sa_sigaction(sig, si, ctx);
        return;
    }
    if (g_prev.sa_handler == SIG_IGN)
        return;
    if (g_prev.sa_handler == SIG_DFL) {
        /* Default action: re-raise with the default disposition; the signal
         * is blocked until we return, then delivered and kills as it would
         * have without us. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), sig);
        return;
    }
    g_prev.sa_handler(sig);
}

/* Move a thread stopped strictly inside a window to where it would have
 * gone.  Returns false when it stands inside but on no known boundary. */
static bool move_out(ucontext_t *uc)
{
    uint64_t pc = mh_arch_pc(uc);
    int n = atomic_load_explicit(&g_nsites, memory_order_acquire);
    uint64_t to_tramp = 0, best = 0;
    bool inside = false;
    /* Every form a window was ever patched with has its entry: a thread
     * may have stopped in a form that is no longer the current one. */
    for (int i = 0; i < n; i++) {
        trap_site *t = &g_sites[i];
        uint64_t at = atomic_load_explicit(&t->at, memory_order_acquire);
        int len = atomic_load_explicit(&t->len, memory_order_acquire);
        if (!(pc > at && pc < at + (uint64_t)len))
            continue;
        inside = true;
        size_t off = (size_t)(pc - at);
        /* Midway through the far jump: its first half ran, so do the rest
         * (the arch tells it from an old instruction that starts there). */
        uint64_t dest = atomic_load_explicit(&t->dest, memory_order_relaxed);
        if (mh_arch_far_jump_midway(uc, len, off, dest)) {
            mh_arch_set_pc(uc, dest);
            return true;
        }
        uint64_t w = atomic_load_explicit(off < 8 ? &t->map_lo : &t->map_hi,
                                          memory_order_relaxed);
        uint8_t to = (uint8_t)(w >> (8 * (off % 8)));
        /* The trampoline of the form whose window ends last: it jumps back
         * past every window of this entry (a shorter one returns inside the
         * longer window). */
        if (to != 0xFF && at + (uint64_t)len > best) {
            to_tramp = atomic_load_explicit(&t->tramp, memory_order_relaxed) + to;
            best = at + (uint64_t)len;
        }
    }
    if (!inside)
        return true;
    if (!to_tramp)
        return false;
    mh_arch_set_pc(uc, to_tramp);
    return true;
}

/* The probe.  Never SIGTRAP itself: a standard signal does not queue, so a
 * probe pending when the thread hits our int3 would swallow the trap. */
static int g_probe_sig;

static void on_probe(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    if (si->si_code != SI_QUEUE ||
        ((uint64_t)(uintptr_t)si->si_value.sival_ptr >> 32) != QUIESCE_MAGIC)
        return; /* not ours: for SIGURG/SIGWINCH the default is to ignore */
    int saved = errno;
    if (!move_out(ctx)) {
        atomic_store(&g_q.stuck_at, mh_arch_pc(ctx));
        atomic_fetch_add(&g_q.stuck, 1);
    }
    /* A late probe of an earlier round still moves the thread (the move
     * depends only on where it stands), but is not this round's answer. */
    uint32_t round = (uint32_t)(uintptr_t)si->si_value.sival_ptr;
    if (round == atomic_load_explicit(&g_q.round, memory_order_acquire))
        atomic_fetch_add_explicit(&g_q.acks, 1, memory_order_release);
    errno = saved;
}

static bool probe_handler_is_ours(int sig)
{
    struct sigaction cur;
    return sigaction(sig, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
           cur.sa_sigaction == on_probe;
}

static bool signal_free(int sig)
{
    struct sigaction cur;
    return sigaction(sig, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
           cur.sa_handler == SIG_DFL;
}

static int probe_handler_set(int sig)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_probe;
    /* SA_NODEFER: a thread inside the handler must not look (in SigBlk) like
     * one that blocks the signal; the handler is reentrant. */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, NULL) == 0 ? 0 : errno;
}

static void on_sigtrap(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    uint64_t trap = mh_arch_trap_address(si, uc);
    if (trap) {
        /* The trampoline's copy of the window's first byte (map[0]: the
         * body's start for a window at the entry, later for one placed
         * after the entry's pushes), in the form whose window ends last
         * (see move_out). */
        int n = atomic_load_explicit(&g_nsites, memory_order_acquire);
        uint64_t to = 0, best = 0;
        for (int i = 0; i < n; i++) {
            int len = atomic_load_explicit(&g_sites[i].len, memory_order_acquire);
            uint64_t at = atomic_load_explicit(&g_sites[i].at, memory_order_acquire);
            uint8_t first = (uint8_t)atomic_load_explicit(&g_sites[i].map_lo,
                                                          memory_order_relaxed);
            if (at == trap && first != 0xFF && at + (uint64_t)len > best) {
                to = atomic_load_explicit(&g_sites[i].tramp, memory_order_acquire) + first;
                best = at + (uint64_t)len;
            }
        }
        if (to) {
            mh_arch_set_pc(uc, to);
            return;
        }
    }
    chain(sig, si, ctx);
}

int mh_trap_handler_ensure(void)
{
    struct sigaction cur;
    if (sigaction(SIGTRAP, NULL, &cur) != 0)
        return errno;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigtrap)
        return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigtrap;
    /* SA_NODEFER: a thread inside the handler must not look (in SigBlk) like
     * one that blocks the signal; the handler is reentrant. */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    /* Whoever held SIGTRAP before (a debugger helper, a crash reporter)
     * still gets every trap that is not ours. */
    if (sigaction(SIGTRAP, &sa, &g_prev) != 0)
        return errno;
    return 0;
}

/* ---- the threads: state, blocked signals, name -------------------------- */

typedef struct thread_info {
    pid_t tid;
    char state;
    uint64_t blocked;        /* SigBlk: bit sig-1 */
    char name[20];
    /* Where it resumes in user mode (mh_task_resume_pc): pc_err 0 when
     * known, EAGAIN "running", else unreadable; read only when asked.
     * frame: a pc strictly inside a window found on its stack (a signal
     * handler interrupted it there), else 0. */
    int pc_err;
    uint64_t pc, sp, frame;
} thread_info;

/* Needs the batch's windows; defined after the batch. */
struct poke_batch;
static bool parked_outside(thread_info *t, const struct poke_batch *b, bool search_stack);

static bool blocks(const thread_info *t, int sig)
{
    return (t->blocked >> (sig - 1)) & 1;
}

/* 'R' (running/runnable) or 'D' (e.g. a page fault): the states in which a
 * thread's user RIP can be anywhere.  A thread asleep in a system call is
 * not disturbed unless the pc it resumes at (parked_outside) lies inside a
 * window. */
static bool may_be_inside(const thread_info *t)
{
    return t->state == 'R' || t->state == 'D' || t->state == '?';
}

static void read_thread(pid_t tid, thread_info *t)
{
    char path[64], buf[2048];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    t->state = '?';
    snprintf(t->name, sizeof t->name, "?");
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        t->state = 'X'; /* exited */
        return;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (strncmp(line, "Name:\t", 6) == 0)
            snprintf(t->name, sizeof t->name, "%s", line + 6);
        else if (strncmp(line, "State:\t", 7) == 0)
            t->state = line[7];
        else if (strncmp(line, "SigBlk:\t", 8) == 0)
            t->blocked = strtoull(line + 8, NULL, 16);
        line = nl ? nl + 1 : NULL;
    }
}

/* Every thread but the caller.  Returns the count (at most cap), or -errno. */
static int list_threads(thread_info *out, int cap)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return -errno;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL && n < cap) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        pid_t tid = (pid_t)atoi(de->d_name);
        if (tid == self)
            continue;
        read_thread(tid, &out[n]);
        if (out[n].state != 'X')
            n++;
    }
    closedir(dir);
    return n;
}

/* The probe signal: the one in use if it is still ours and no thread
 * blocks it, else the highest free real-time signal no thread blocks, else
 * SIGURG or SIGWINCH (free and unblocked), else the best real-time one
 * (then the threads that block it cannot be probed).  0 when none is free. */
static int probe_signal_choose(const thread_info *th, int nth)
{
    int cands[64], nc = 0;
    if (g_probe_sig && probe_handler_is_ours(g_probe_sig))
        cands[nc++] = g_probe_sig;
    for (int sig = SIGRTMAX; sig >= SIGRTMIN && nc < 60; sig--)
        if (sig != g_probe_sig && signal_free(sig))
            cands[nc++] = sig;
    int rt = nc;
    if (SIGURG != g_probe_sig && signal_free(SIGURG))
        cands[nc++] = SIGURG;
    if (SIGWINCH != g_probe_sig && signal_free(SIGWINCH))
        cands[nc++] = SIGWINCH;
    int pick = 0;
    for (int c = 0; c < nc && !pick; c++) {
        bool ok = true;
        for (int i = 0; i < nth && ok; i++)
            ok = !blocks(&th[i], cands[c]);
        if (ok)
            pick = cands[c];
    }
    if (!pick && rt > 0)
        pick = cands[0];
    if (!pick)
        return 0;
    if (!probe_handler_is_ours(pick) && probe_handler_set(pick) != 0)
        return 0;
    g_probe_sig = pick;
    return pick;
}

/* A thread that blocks the probe signal while it may be inside a window.
 * glibc blocks every signal in a thread that is being created or is
 * exiting, for microseconds of that thread's own run time - which a loaded
 * box may spread over many scheduler periods: a new thread can wait on a
 * run queue, every signal blocked, for longer than any fixed wall-clock
 * wait.  So a thread is deaf once it still blocks after DEAF_WAIT_NS and,
 * if it is runnable, after it has run DEAF_RUN_NS since the first look
 * (its own CPU clock); one the scheduler keeps off every CPU is deaf after
 * DEAF_WAIT_MAX_NS all the same (the install stays bounded).  A sleeping
 * thread is in no transient - the watchdog faulthandler starts blocks
 * every signal and sleeps for good - so it waits DEAF_WAIT_NS only. */
#define DEAF_WAIT_NS 10000000ULL
#define DEAF_RUN_NS 1000000ULL
#define DEAF_WAIT_MAX_NS 1000000000ULL

/* Whether holds(t, sig) stays true past glibc's transient all-blocked masks:
 * re-read the thread every 100 us until it counts as deaf (see above). */
static bool holds_past_transient(thread_info *t, int sig, const struct poke_batch *b,
                                 bool (*holds)(thread_info *, int, const struct poke_batch *))
{
    uint64_t start = 0;
    int64_t ran_from = -1;
    for (;;) {
        if (!holds(t, sig, b))
            return false;
        uint64_t now = mh_monotonic_ns();
        int64_t cpu = mh_thread_cpu_ns((int)t->tid);
        if (start == 0) {
            start = now;
            ran_from = cpu;
        } else if (now - start > DEAF_WAIT_MAX_NS ||
                   (now - start > DEAF_WAIT_NS &&
                    (t->state != 'R' || cpu < 0 || ran_from < 0 ||
                     (uint64_t)(cpu - ran_from) >= DEAF_RUN_NS))) {
            return true;
        }
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        read_thread(t->tid, t);
    }
}

/* A thread that cannot hear the probe is harmless when the kernel shows it
 * parked with its resume pc outside every window (parked_outside): it runs
 * no user code before it resumes there, and once the barriers are in, a
 * way back into a window passes a barrier first (docs/design/live-patching.md). */
static bool inside_and_blocking(thread_info *t, int psig, const struct poke_batch *b)
{
    return t->state != 'X' && (psig == 0 || blocks(t, psig)) && !parked_outside(t, b, true);
}

static bool alive_and_blocking(thread_info *t, int sig, const struct poke_batch *b)
{
    (void)b;
    return t->state != 'X' && blocks(t, sig);
}

static bool deaf(thread_info *t, int psig, const struct poke_batch *b)
{
    return holds_past_transient(t, psig, b, inside_and_blocking);
}

/* Does t block SIGTRAP for longer than the glibc transients (see deaf)? */
static bool blocks_trap(thread_info *t)
{
    return holds_past_transient(t, SIGTRAP, NULL, alive_and_blocking);
}

/* ---- the protocol ---------------------------------------------------------- */

/* How long we wait for the probes' answers.  An unanswered probe is taken
 * before its thread runs user code again (see the top of the file); the
 * wait covers the only case that is not so, a thread running on another
 * CPU until the IPI that signal delivery sends it lands (microseconds; a
 * vCPU the hypervisor descheduled executes nothing meanwhile either). */
#define PROBE_WAIT_NS 500000ULL
#define MAX_THREADS 4096

static inline void store_byte(uint64_t at, uint8_t v)
{
    __atomic_store_n((volatile uint8_t *)(uintptr_t)at, v, __ATOMIC_RELEASE);
}

/* Protections of the sorted, distinct pages from one walk of
 * /proc/self/maps (-1 for a page not mapped).  The core's reader: no
 * malloc, no stdio (other threads may be stopped anywhere meanwhile). */
typedef struct pages_walk {
    const uint64_t *page;
    int n, next;
    int *prot;
} pages_walk;

static bool page_line(const mh_map_entry *e, void *ctx)
{
    pages_walk *w = ctx;
    while (w->next < w->n && w->page[w->next] < e->start)
        w->next++; /* not mapped */
    while (w->next < w->n && w->page[w->next] >= e->start && w->page[w->next] < e->end)
        w->prot[w->next++] = e->prot;
    return w->next < w->n;
}

static void pages_prot(const uint64_t *page, int n, int *prot)
{
    for (int i = 0; i < n; i++)
        prot[i] = -1;
    pages_walk w = {page, n, 0, prot};
    if (n > 0)
        mh_maps_each(page_line, &w);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void fail_all(mh_poke *s, size_t n, int err, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i].err == 0) {
            s[i].err = err;
            snprintf(s[i].why, sizeof s[i].why, "%s", why);
        }
    }
}

/* Refuse every window with an instruction boundary inside that is not
 * refused already: its threads cannot be moved out. */
static void refuse_unrefused_interiors(mh_poke *s, size_t n, const char *why)
{
    for (size_t k = 0; k < n; k++) {
        if (s[k].interior && !s[k].err) {
            s[k].err = EAGAIN;
            snprintf(s[k].why, sizeof s[k].why, "%s", why);
        }
    }
}

/* What one batch carries from step to step. */
typedef struct poke_batch {
    mh_poke *s;
    size_t n;
    thread_info *th;   /* MAX_THREADS of them */
    int nth;
    bool spin;         /* the barrier is "jmp ." (a thread blocks SIGTRAP) */
    int psig;          /* the probe signal; 0 when no window needs one */
    size_t ps;         /* the page size */
    uint64_t *page;    /* sorted, distinct pages of the windows not refused */
    int *prot;         /* their protections before step 1 */
    int npages;
    pid_t known_blocker; /* the caller found it blocking SIGTRAP (0: none) */
    char why[200];
} poke_batch;

static bool in_a_window(const struct poke_batch *b, uint64_t pc)
{
    for (size_t i = 0; b && i < b->n; i++) {
        const mh_poke *w = &b->s[i];
        if (!w->err && pc > w->at && pc < w->at + w->len)
            return true;
    }
    return false;
}

/* The end of the mapping that holds a stack pointer. */
typedef struct stack_find {
    uint64_t sp, end;
} stack_find;

static bool stack_line(const mh_map_entry *e, void *ctx)
{
    stack_find *f = ctx;
    if (f->sp >= e->start && f->sp < e->end) {
        f->end = e->end;
        return false;
    }
    return e->start <= f->sp;
}

/* How much of a parked thread's stack (from its sp up) is searched for a
 * saved pc inside a window; a deeper stack leaves the thread unlocated. */
#define STACK_SCAN_MAX ((uint64_t)1 << 20)

/* A thread parked in a signal handler resumes, when the handler returns,
 * at the pc the signal interrupted - saved in the signal frame on its
 * stack, above its sp.  So every word of the used stack is compared with
 * the windows (a call's return address never lies strictly inside one:
 * the planner refuses such calls, so a hit is a saved pc, or a stray value
 * that refuses for nothing worse than caution).  The stack is the mapping
 * that holds the sp (a thread's stack, the main stack, or the sigaltstack
 * the handler runs on, which holds its frame).  Returns false when it
 * cannot be searched whole.  Another thread's stack holds a sanitizer's
 * poisoned redzones: reading them is the point here. */
__attribute__((no_sanitize_address))
static bool stack_clear(thread_info *t, const struct poke_batch *b)
{
    stack_find f = {t->sp, 0};
    if (mh_maps_each(stack_line, &f) != 0 || f.end == 0 || f.end - t->sp > STACK_SCAN_MAX) {
        t->pc_err = E2BIG;
        return false;
    }
    uint64_t lo = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (!b->s[i].err) {
            lo = b->s[i].at < lo ? b->s[i].at : lo;
            hi = b->s[i].at + b->s[i].len > hi ? b->s[i].at + b->s[i].len : hi;
        }
    }
    for (uint64_t a = t->sp & ~(uint64_t)7; a + 8 <= f.end; a += 8) {
        uint64_t v = *(const volatile uint64_t *)(uintptr_t)a;
        if (v > lo && v < hi && in_a_window(b, v)) {
            t->frame = v;
            return false;
        }
    }
    return true;
}

/* Whether the kernel shows t parked (off its CPU, not run since it looked)
 * with nothing that would resume strictly inside a window still to be
 * written: not its pc, nor (search_stack) a pc a signal handler it sleeps
 * in would return to (stack_clear).  At +0 it meets the barrier.  The
 * context switch count, equal before the first look and after the second,
 * says it did not run meanwhile, so its stack held still while it was
 * searched.  A thread that is running, or whose /proc files cannot be
 * read, is not.  The stack is searched for the threads no probe reaches;
 * one the probe reaches is only asked where it sleeps (see asleep_inside). */
static bool parked_outside(thread_info *t, const struct poke_batch *b, bool search_stack)
{
    t->frame = 0;
    long long before = search_stack ? mh_task_switches((int)t->tid) : 0;
    t->pc_err = mh_task_resume_pc((int)t->tid, &t->pc, &t->sp);
    if (t->pc_err == ESRCH)
        return true; /* gone */
    if (t->pc_err == 0 && before < 0)
        t->pc_err = EIO;
    if (t->pc_err || in_a_window(b, t->pc))
        return false;
    if (!search_stack)
        return true;
    if (!stack_clear(t, b))
        return false;
    uint64_t pc2 = 0, sp2 = 0;
    int again = mh_task_resume_pc((int)t->tid, &pc2, &sp2);
    if (again == ESRCH)
        return true;
    if (again || pc2 != t->pc || sp2 != t->sp || mh_task_switches((int)t->tid) != before) {
        t->pc_err = EAGAIN; /* it ran while we looked */
        return false;
    }
    return true;
}

/* Whether a thread found asleep may stand inside a window after all: it
 * woke since (the kernel says "running"), or it sleeps at a pc inside one
 * (a page fault served by userfaultfd sleeps interruptibly).  Unreadable:
 * taken as asleep at its system call, as every sleeping thread was before
 * this file was read (probing them all would interrupt system calls that
 * do not restart); a thread no probe reaches gets no such benefit.  Its
 * stack is not searched: a handler it sleeps in would take the probe in
 * its own context, not the one it interrupted (the residual case of
 * docs/design/live-patching.md). */
static bool asleep_inside(thread_info *t, const poke_batch *b)
{
    return !parked_outside(t, b, false) && (t->pc_err == EAGAIN || t->pc_err == 0);
}

/* "is running ...", "is parked at +3 of a window": why a thread that
 * cannot hear the probe may be inside a window (after parked_outside). */
static void where_text(const thread_info *t, const poke_batch *b, char *buf, size_t len)
{
    if (t->pc_err == EAGAIN) {
        snprintf(buf, len, "is running (where it resumes is unknown)");
        return;
    }
    if (t->pc_err == E2BIG) {
        snprintf(buf, len, "has a stack too deep to search");
        return;
    }
    if (t->pc_err) {
        snprintf(buf, len, "has no readable /proc/.../syscall (errno %d)", t->pc_err);
        return;
    }
    if (t->frame) {
        snprintf(buf, len, "has a pc inside a window saved on its stack");
        return;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (t->pc > b->s[i].at && t->pc < b->s[i].at + b->s[i].len) {
            snprintf(buf, len, "is parked at +%llu of a window",
                     (unsigned long long)(t->pc - b->s[i].at));
            return;
        }
    }
    snprintf(buf, len, "may stand inside a window");
}

/* A thread that cannot hear the probe, located (parked) with its pc or a
 * signal frame's saved pc strictly inside a window: only the windows that
 * hold that pc are refused, with b->why.  False when it is not located
 * (then every interior window must be). */
static bool refuse_where_located(poke_batch *b, const thread_info *t)
{
    uint64_t hit = t->frame ? t->frame : t->pc;
    if (t->pc_err != 0 || !in_a_window(b, hit))
        return false;
    for (size_t k = 0; k < b->n; k++) {
        mh_poke *w = &b->s[k];
        if (!w->err && hit > w->at && hit < w->at + w->len) {
            w->err = EAGAIN;
            snprintf(w->why, sizeof w->why, "%s", b->why);
        }
    }
    return true;
}

static void poke_batch_free(poke_batch *b)
{
    free(b->page);
    free(b->prot);
    free(b->th);
}

/* Step 0, SIGTRAP: when a thread blocks it, an int3 it ran into would kill
 * it, so the barrier at byte 0 is "jmp ." (eb fe) instead: a thread that
 * enters spins there until the new bytes are in, no signal involved.  It
 * needs bytes 0-1 in one cache line (one atomic 2-byte store) and a first
 * instruction longer than one byte; other windows are refused. */
static void barrier_choose(poke_batch *b)
{
    const thread_info *trap_blocker = NULL;
    /* The caller's blocker first: it held past the transients already, so
     * one look that finds it still blocking settles it. */
    for (int i = 0; i < b->nth && !trap_blocker && b->known_blocker; i++)
        if (b->th[i].tid == b->known_blocker && alive_and_blocking(&b->th[i], SIGTRAP, NULL))
            trap_blocker = &b->th[i];
    for (int i = 0; i < b->nth && !trap_blocker; i++)
        if (blocks_trap(&b->th[i]))
            trap_blocker = &b->th[i];
    if (!trap_blocker)
        return;
    b->spin = true;
    mh_poke *s = b->s;
    for (size_t i = 0; i < b->n; i++) {
        if (!mh_arch_spin_barrier_fits(s[i].at) || s[i].len < 2 || s[i].boundary1) {
            s[i].err = EAGAIN;
            snprintf(s[i].why, sizeof s[i].why, "thread %d (%s) blocks SIGTRAP (an int3 "
                     "would kill it) and %s", (int)trap_blocker->tid, trap_blocker->name,
                     s[i].boundary1 ? "the first instruction is one byte long, so a "
                     "two-byte spin barrier would cut the next one"
                                    : "the window's first two bytes straddle a cache "
                     "line (no atomic spin barrier)");
        }
    }
}

/* Step 0, the probe: when a window has an instruction boundary inside,
 * pick the probe signal; refuse those windows when a thread that may be
 * inside one cannot hear it. */
static void probe_choose(poke_batch *b)
{
    mh_poke *s = b->s;
    bool any_interior = false;
    for (size_t i = 0; i < b->n; i++)
        any_interior |= s[i].interior;
    if (!any_interior)
        return;
    b->psig = probe_signal_choose(b->th, b->nth);
    for (int i = 0; i < b->nth; i++) {
        thread_info *t = &b->th[i];
        if (!deaf(t, b->psig, b))
            continue;
        char where[56];
        where_text(t, b, where, sizeof where);
        if (b->psig)
            snprintf(b->why, sizeof b->why, "thread %d (%s) blocks every free probe signal "
                     "(%d too) and %s: it cannot be moved out of a window with a boundary "
                     "inside", (int)t->tid, t->name, b->psig, where);
        else
            snprintf(b->why, sizeof b->why, "no free signal to probe the threads with (every "
                     "real-time signal, SIGURG and SIGWINCH have handlers)");
        if (b->psig && refuse_where_located(b, t))
            continue;
        /* Every interior window, refused already or not: this reason wins. */
        for (size_t k = 0; k < b->n; k++) {
            if (s[k].interior) {
                s[k].err = EAGAIN;
                snprintf(s[k].why, sizeof s[k].why, "%s", b->why);
            }
        }
        return;
    }
}

/* Step 0: list the threads and plan the signals.  False when the whole
 * batch is refused (every window says why). */
static bool signals_plan(poke_batch *b)
{
    b->th = malloc(sizeof *b->th * MAX_THREADS);
    if (!b->th) {
        fail_all(b->s, b->n, ENOMEM, "out of memory");
        return false;
    }
    b->nth = list_threads(b->th, MAX_THREADS);
    if (b->nth < 0) {
        snprintf(b->why, sizeof b->why, "cannot list the threads in /proc/self/task: %s",
                 strerror(-b->nth));
        fail_all(b->s, b->n, -b->nth, b->why);
        return false;
    }
    barrier_choose(b);
    probe_choose(b);
    return true;
}

/* Step 1: the sorted, distinct pages of the windows not refused, and their
 * protections. */
static bool pages_collect(poke_batch *b)
{
    mh_poke *s = b->s;
    b->ps = (size_t)sysconf(_SC_PAGESIZE);
    b->page = malloc(sizeof *b->page * 2 * b->n);
    b->prot = malloc(sizeof *b->prot * 2 * b->n);
    if (!b->page || !b->prot) {
        fail_all(s, b->n, ENOMEM, "out of memory");
        return false;
    }
    int npages = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (s[i].err)
            continue;
        b->page[npages++] = s[i].at & ~(uint64_t)(b->ps - 1);
        b->page[npages++] = (s[i].at + s[i].len - 1) & ~(uint64_t)(b->ps - 1);
    }
    qsort(b->page, (size_t)npages, sizeof *b->page, cmp_u64);
    int distinct = 0;
    for (int i = 0; i < npages; i++)
        if (distinct == 0 || b->page[distinct - 1] != b->page[i])
            b->page[distinct++] = b->page[i];
    b->npages = distinct;
    pages_prot(b->page, b->npages, b->prot);
    return true;
}

/* Step 1: every page R+W+X, or none changed and the batch refused (a W^X
 * host refuses). */
static bool pages_make_writable(poke_batch *b)
{
    if (!pages_collect(b))
        return false;
    int done = 0, err = 0;
    for (; done < b->npages; done++) {
        if (b->prot[done] < 0) {
            snprintf(b->why, sizeof b->why, "page %#llx is not in /proc/self/maps",
                     (unsigned long long)b->page[done]);
            err = EFAULT;
            break;
        }
        if (mprotect((void *)(uintptr_t)b->page[done], b->ps,
                     b->prot[done] | PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
            err = errno;
            snprintf(b->why, sizeof b->why, "the host refuses writable+executable code: "
                     "mprotect(%#llx, PROT_READ|PROT_WRITE|PROT_EXEC) failed: %s",
                     (unsigned long long)b->page[done], strerror(err));
            break;
        }
    }
    if (!err)
        return true;
    for (int j = 0; j < done; j++)
        mprotect((void *)(uintptr_t)b->page[j], b->ps, b->prot[j]);
    fail_all(b->s, b->n, err, b->why);
    return false;
}

/* Step 2: the barrier at every window's byte 0 - int3, or eb fe when a
 * thread blocks SIGTRAP - remembering the bytes it replaces. */
static void barriers_store(poke_batch *b)
{
    mh_poke *s = b->s;
    for (size_t i = 0; i < b->n; i++) {
        s[i].old0 = *(volatile uint8_t *)(uintptr_t)s[i].at;
        memcpy(&s[i].old01, (const void *)(uintptr_t)s[i].at, 2);
        if (!s[i].err) {
            if (b->spin)
                mh_arch_store_pair(s[i].at, MH_ARCH_SPIN_BARRIER);
            else
                store_byte(s[i].at, MH_ARCH_TRAP_BYTE);
        }
    }
    mh_sync_cores();
}

/* Step 3: the threads again, now that nobody can newly get inside a window
 * (one started since step 0 is in this list).  A thread that began to
 * block SIGTRAP since step 0 makes us take every int3 back at once; one
 * deaf to the probe refuses the interior windows.  Returns whether any
 * window still needs the probe. */
static bool threads_recheck(poke_batch *b)
{
    mh_poke *s = b->s;
    b->nth = list_threads(b->th, MAX_THREADS);
    for (int i = 0; i < b->nth && !b->spin; i++) {
        if (blocks_trap(&b->th[i])) {
            snprintf(b->why, sizeof b->why, "thread %d (%s) blocks SIGTRAP, and one that "
                     "runs into the int3 of the live-write protocol would be killed by the "
                     "kernel", (int)b->th[i].tid, b->th[i].name);
            fail_all(s, b->n, EAGAIN, b->why);
            break;
        }
    }
    bool probe = false;
    for (size_t i = 0; i < b->n; i++)
        probe |= s[i].interior && !s[i].err;
    for (int i = 0; i < b->nth && probe; i++) {
        if (deaf(&b->th[i], b->psig, b)) {
            char where[56];
            where_text(&b->th[i], b, where, sizeof where);
            snprintf(b->why, sizeof b->why, "thread %d (%s) blocks signal %d, the probe, and "
                     "%s: it cannot be moved out of a window with a boundary inside",
                     (int)b->th[i].tid, b->th[i].name, b->psig, where);
            if (!refuse_where_located(b, &b->th[i]))
                refuse_unrefused_interiors(s, b->n, b->why);
            probe = false;
            for (size_t k = 0; k < b->n; k++)
                probe |= s[k].interior && !s[k].err;
        }
    }
    return probe;
}

/* Step 3: one probe to every thread that may stand inside a window.
 * Returns how many were queued; a probe that cannot be queued refuses the
 * interior windows. */
static int probes_send(poke_batch *b, uint32_t round)
{
    pid_t pid = getpid();
    int sent = 0;
    for (int i = 0; i < b->nth; i++) {
        if (!may_be_inside(&b->th[i]) && !asleep_inside(&b->th[i], b))
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        si.si_signo = b->psig;
        si.si_code = SI_QUEUE;
        si.si_pid = pid;
        si.si_uid = getuid();
        si.si_value.sival_ptr = (void *)(uintptr_t)((QUIESCE_MAGIC << 32) | round);
        if (syscall(SYS_rt_tgsigqueueinfo, pid, b->th[i].tid, b->psig, &si) == 0) {
            sent++;
        } else if (errno != ESRCH) {
            /* Not queued (e.g. RLIMIT_SIGPENDING): it cannot be moved. */
            snprintf(b->why, sizeof b->why, "cannot send the probe (signal %d) to thread %d "
                     "(%s): %s", b->psig, (int)b->th[i].tid, b->th[i].name, strerror(errno));
            refuse_unrefused_interiors(b->s, b->n, b->why);
        }
    }
    return sent;
}

/* Step 3: probe, wait a bounded time for the answers, and refuse a window
 * a thread stands inside off every boundary (it cannot be moved). */
static void threads_move_out(poke_batch *b)
{
    atomic_store(&g_q.acks, 0);
    atomic_store(&g_q.stuck, 0);
    uint32_t round = atomic_fetch_add(&g_q.round, 1) + 1;
    int sent = probes_send(b, round);
    /* Spin, not yield: yielding to a spinner costs a time slice, and
     * the answers that matter come from threads on other CPUs. */
    uint64_t end = mh_monotonic_ns() + PROBE_WAIT_NS;
    while (atomic_load_explicit(&g_q.acks, memory_order_acquire) < sent && mh_monotonic_ns() < end)
        mh_arch_cpu_relax();
    if (atomic_load(&g_q.stuck) == 0)
        return;
    uint64_t pc = atomic_load(&g_q.stuck_at);
    mh_poke *s = b->s;
    for (size_t i = 0; i < b->n; i++) {
        if (!s[i].err && pc > s[i].at && pc < s[i].at + s[i].len) {
            s[i].err = EAGAIN;
            snprintf(s[i].why, sizeof s[i].why, "a thread stands at +%llu of the "
                     "window, which is no instruction boundary of it",
                     (unsigned long long)(pc - s[i].at));
        }
    }
}

/* Step 4: the tails, sync, then byte 0 (or the old byte 0 back where we
 * gave up), sync.  Returns how many windows were written. */
static size_t windows_write(poke_batch *b)
{
    mh_poke *s = b->s;
    size_t written = 0, head = b->spin ? 2 : 1;
    for (size_t i = 0; i < b->n; i++)
        if (!s[i].err)
            memcpy((void *)(uintptr_t)(s[i].at + head), s[i].bytes + head, s[i].len - head);
    mh_sync_cores();
    for (size_t i = 0; i < b->n; i++) {
        uint16_t now2;
        memcpy(&now2, (const void *)(uintptr_t)s[i].at, 2);
        if (!s[i].err) {
            if (b->spin) {
                uint16_t v;
                memcpy(&v, s[i].bytes, 2);
                mh_arch_store_pair(s[i].at, v);
            } else {
                store_byte(s[i].at, s[i].bytes[0]);
            }
            written++;
        } else if (b->spin && now2 == MH_ARCH_SPIN_BARRIER &&
                   s[i].old01 != MH_ARCH_SPIN_BARRIER) {
            mh_arch_store_pair(s[i].at, s[i].old01); /* our barrier comes out */
        } else if (!b->spin && (now2 & 0xFF) == MH_ARCH_TRAP_BYTE &&
                   s[i].old0 != MH_ARCH_TRAP_BYTE) {
            store_byte(s[i].at, s[i].old0); /* our trap comes out */
        }
    }
    mh_sync_cores();
    return written;
}

/* Step 5: every page's protection back.  Dropping permissions does not
 * fail short of ENOMEM splitting a mapping; try once more then, and say
 * so in every written window. */
static void pages_restore(poke_batch *b)
{
    mh_poke *s = b->s;
    for (int j = 0; j < b->npages; j++) {
        if (mprotect((void *)(uintptr_t)b->page[j], b->ps, b->prot[j]) != 0 &&
            mprotect((void *)(uintptr_t)b->page[j], b->ps, b->prot[j]) != 0) {
            for (size_t i = 0; i < b->n; i++)
                if (!s[i].err)
                    snprintf(s[i].why, sizeof s[i].why, "written, but page %#llx stays "
                             "writable: %s", (unsigned long long)b->page[j], strerror(errno));
        }
    }
}

pid_t mh_text_poke_trap_blocker(void)
{
    thread_info *th = malloc(sizeof *th * MAX_THREADS);
    if (!th)
        return 0; /* the batch itself will say "out of memory" */
    int n = list_threads(th, MAX_THREADS);
    pid_t found = 0;
    for (int i = 0; i < n && !found; i++)
        if (blocks_trap(&th[i]))
            found = th[i].tid;
    free(th);
    return found;
}

/* The steps of the file comment, in order. */
size_t mh_text_poke_batch(mh_poke *s, size_t n, pid_t trap_blocker)
{
    for (size_t i = 0; i < n; i++) {
        s[i].err = 0;
        s[i].why[0] = '\0';
    }
    if (n == 0)
        return 0;
    poke_batch b = {.s = s, .n = n, .known_blocker = trap_blocker};
    int err = mh_trap_handler_ensure();
    if (err) {
        snprintf(b.why, sizeof b.why, "cannot install the SIGTRAP handler: %s", strerror(err));
        fail_all(s, n, err, b.why);
        return 0;
    }
    if (!signals_plan(&b) || !pages_make_writable(&b)) {
        poke_batch_free(&b);
        return 0;
    }
    /* The installing thread may block SIGTRAP itself (it never runs a
     * window meanwhile, but a handler it calls might). */
    sigset_t trap, old;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    pthread_sigmask(SIG_UNBLOCK, &trap, &old);
    barriers_store(&b);
    if (threads_recheck(&b))
        threads_move_out(&b);
    size_t written = windows_write(&b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pages_restore(&b);
    poke_batch_free(&b);
    return written;
}

int mh_text_poke(uint64_t at, const uint8_t *new_bytes, size_t len, bool interior,
                 char *why, size_t why_len)
{
    mh_poke p = {.at = at, .bytes = new_bytes, .len = len, .interior = interior};
    mh_text_poke_batch(&p, 1, 0);
    if (p.err && why && why_len)
        snprintf(why, why_len, "%s", p.why);
    return p.err;
}
