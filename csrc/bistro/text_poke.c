/*
 * text_poke.c - writing live code that other threads may be executing.
 *
 * The int3 protocol (one patch window [at, at+len), len 5 or 12):
 *
 *   0. read the original protection of each page from /proc/self/maps and
 *      mprotect them R+W+X.  This is the step a W^X host (SELinux execmod,
 *      PaX, a seccomp filter) refuses: we return its errno with nothing
 *      written.
 *   1. store 0xCC at `at`; sync cores.  From here a thread entering the
 *      window traps; the SIGTRAP handler sends it to the trampoline body
 *      (original behaviour).
 *   2. quiesce: a thread may already stand on an instruction boundary
 *      inside (at, at+len) -- it entered before step 1 and was interrupted
 *      or preempted there.  Such a thread would resume in the middle of the
 *      new bytes.  We signal every runnable thread of the process (with a
 *      free real-time signal, queued) and look at the interrupted RIP in
 *      the handler; until none is inside, we yield and
 *      ask again (nobody can newly get inside: the only way in is through
 *      the int3, and branches back into the window are refused by patch.c).
 *      Skipped when the old bytes have no instruction boundary inside
 *      (a lone 5-byte jmp).
 *   3. store bytes 1..len-1; sync cores.
 *   4. store byte 0; sync cores.
 *   5. mprotect each page back to its original protection.
 *
 * Removing a patch is the same protocol with the original bytes.  Every
 * store to byte 0 is a single-byte store, so fetches see either the old or
 * the new byte; bytes 1.. are only written while byte 0 is an int3 and
 * nobody is inside.
 *
 * "Sync cores" is membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE):
 * every CPU running a thread of ours executes a core-serializing instruction
 * before the call returns, so none keeps stale prefetched bytes (Intel SDM
 * vol. 3, 8.1.3 cross-modifying code).  Kernels without it (< 4.16, or with
 * membarrier disabled) get a fallback: downgrading the protection of a
 * present, touched page of ours makes the kernel flush that TLB entry on
 * every CPU in the mm's cpumask with an IPI, and the return from that
 * interrupt (IRET) is serializing.  That covers every CPU currently running
 * one of our threads; a thread scheduled in later passes through a CR3 write
 * or IRET on its way back to user mode, both serializing.
 *
 * The SIGTRAP and probe handlers are async-signal-safe: they read atomics,
 * compare addresses, write the ucontext, and chain with sigaction/tgkill
 * only.
 */
#include "bistro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
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

/* ---- /proc/self/maps ---------------------------------------------------- */

int mh_page_prot(uint64_t addr)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[8192];
    size_t have = 0;
    int prot = -1;
    bool done = false;
    while (!done) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        char *line = buf;
        char *nl;
        while ((nl = strchr(line, '\n')) != NULL) {
            *nl = '\0';
            unsigned long long lo, hi;
            char perms[5];
            if (sscanf(line, "%llx-%llx %4s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi) {
                prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                       (perms[2] == 'x' ? PROT_EXEC : 0);
                done = true;
                break;
            }
            if (sscanf(line, "%llx", &lo) == 1 && lo > addr) { /* sorted: past it */
                done = true;
                break;
            }
            line = nl + 1;
        }
        if (!done) {
            have = strlen(line);
            memmove(buf, line, have);
            if (have >= sizeof buf - 1) /* absurd line: drop it */
                have = 0;
        }
    }
    close(fd);
    return prot;
}

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

/* ---- SIGTRAP: int3 redirects and quiesce probes -------------------------- */

#define MH_TRAP_SITES 4096
#define QUIESCE_MAGIC 0x6d68626bULL /* "mhbk" */

/* Process-wide, lock-free tables the signal handlers read: a handler runs
 * on any thread at any time and can take no lock.  Entries are only added
 * (under the install mutex) and published with release stores. */
static struct {
    _Atomic uint64_t at;
    _Atomic uint64_t redirect;
} g_sites[MH_TRAP_SITES];
static _Atomic int g_nsites;

static struct {
    _Atomic uint32_t round;
    _Atomic uint64_t lo, hi;  /* a thread at lo < rip < hi is "inside" */
    _Atomic int acks, busy;
} g_q;

static struct sigaction g_prev;

int mh_trap_register(uint64_t at, uint64_t redirect)
{
    int n = atomic_load_explicit(&g_nsites, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (atomic_load_explicit(&g_sites[i].at, memory_order_relaxed) == at) {
            atomic_store_explicit(&g_sites[i].redirect, redirect, memory_order_release);
            return 0;
        }
    }
    if (n >= MH_TRAP_SITES)
        return ENOMEM;
    atomic_store_explicit(&g_sites[n].redirect, redirect, memory_order_relaxed);
    atomic_store_explicit(&g_sites[n].at, at, memory_order_relaxed);
    atomic_store_explicit(&g_nsites, n + 1, memory_order_release);
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

/* The quiesce probe.  It is a real-time signal, never SIGTRAP itself: a
 * standard signal does not queue, so a probe pending when the thread hits
 * our int3 would swallow the trap's SIGTRAP and the thread would run on
 * from the middle of the window. */
static int g_probe_sig;

static void on_probe(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    uint64_t rip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    (void)sig;
    if (si->si_code != SI_QUEUE ||
        ((uint64_t)(uintptr_t)si->si_value.sival_ptr >> 32) != QUIESCE_MAGIC)
        return;
    uint32_t round = (uint32_t)(uintptr_t)si->si_value.sival_ptr;
    if (round != atomic_load_explicit(&g_q.round, memory_order_acquire))
        return; /* a late probe of an earlier round */
    if (rip > atomic_load(&g_q.lo) && rip < atomic_load(&g_q.hi))
        atomic_fetch_add(&g_q.busy, 1);
    atomic_fetch_add_explicit(&g_q.acks, 1, memory_order_release);
}

/* Use (and keep) the highest real-time signal nobody else handles. */
static int probe_signal_ensure(void)
{
    struct sigaction cur;
    if (g_probe_sig && sigaction(g_probe_sig, NULL, &cur) == 0 &&
        (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_probe)
        return 0;
    for (int sig = SIGRTMAX; sig >= SIGRTMIN; sig--) {
        if (sigaction(sig, NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) ||
            cur.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_probe;
        sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) {
            g_probe_sig = sig;
            return 0;
        }
    }
    return EAGAIN;
}

static void on_sigtrap(int sig, siginfo_t *si, void *ctx)
{
    ucontext_t *uc = ctx;
    uint64_t rip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    if (si->si_code == SI_KERNEL) { /* int3 */
        int n = atomic_load_explicit(&g_nsites, memory_order_acquire);
        for (int i = 0; i < n; i++) {
            if (atomic_load_explicit(&g_sites[i].at, memory_order_relaxed) == rip - 1) {
                uc->uc_mcontext.gregs[REG_RIP] = (greg_t)atomic_load_explicit(
                    &g_sites[i].redirect, memory_order_acquire);
                return;
            }
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
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    /* Whoever held SIGTRAP before (a debugger helper, a crash reporter)
     * still gets every trap that is not ours. */
    if (sigaction(SIGTRAP, &sa, &g_prev) != 0)
        return errno;
    return 0;
}

/* ---- quiesce --------------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* 'R' (running/runnable) or 'D' (e.g. an instruction or data page fault):
 * the states in which a thread's user RIP can be anywhere.  A thread asleep
 * in a system call ('S') sits at a syscall instruction, not in a patch
 * window, and is not disturbed (a signal would cost it an EINTR). */
static bool task_may_be_inside(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false; /* exited */
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ')
        return true;
    char st = rp[2];
    return st == 'R' || st == 'D';
}

static int probe_threads(uint32_t round)
{
    pid_t pid = getpid();
    pid_t self = (pid_t)syscall(SYS_gettid);
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return -errno;
    int sent = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        pid_t tid = (pid_t)atoi(de->d_name);
        if (tid == self || !task_may_be_inside(tid))
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        si.si_signo = g_probe_sig;
        si.si_code = SI_QUEUE;
        si.si_pid = pid;
        si.si_uid = getuid();
        si.si_value.sival_ptr = (void *)(uintptr_t)((QUIESCE_MAGIC << 32) | round);
        if (syscall(SYS_rt_tgsigqueueinfo, pid, tid, g_probe_sig, &si) == 0)
            sent++;
    }
    closedir(dir);
    return sent;
}

static int quiesce(uint64_t lo, uint64_t hi)
{
    int err = probe_signal_ensure();
    if (err)
        return err;
    uint64_t deadline = now_ns() + 2000000000ULL;
    for (unsigned attempt = 0;; attempt++) {
        atomic_store(&g_q.lo, lo);
        atomic_store(&g_q.hi, hi);
        atomic_store(&g_q.acks, 0);
        atomic_store(&g_q.busy, 0);
        uint32_t round = atomic_fetch_add(&g_q.round, 1) + 1;
        int sent = probe_threads(round);
        if (sent < 0)
            return -sent;
        /* Wait for every probed thread's answer (a thread that exits
         * meanwhile never answers: give up on this round after 20 ms). */
        uint64_t round_end = now_ns() + 20000000ULL;
        for (unsigned spin = 0; atomic_load_explicit(&g_q.acks, memory_order_acquire) < sent;
             spin++) {
            if (now_ns() > round_end)
                break;
            if (spin < 64) {
                sched_yield();
            } else { /* let the probed threads have this CPU */
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
        }
        if (atomic_load_explicit(&g_q.acks, memory_order_acquire) >= sent &&
            atomic_load(&g_q.busy) == 0)
            return 0;
        if (now_ns() > deadline)
            return EBUSY;
        /* Someone is inside: give it the CPU to walk out. */
        struct timespec ts = {0, attempt < 4 ? 20000 : 200000};
        nanosleep(&ts, NULL);
    }
}

/* ---- the protocol ---------------------------------------------------------- */

static int set_prot(uint64_t first, int npages, size_t ps, const int *prot, bool rwx)
{
    for (int i = 0; i < npages; i++) {
        int p = rwx ? (prot[i] | PROT_READ | PROT_WRITE | PROT_EXEC) : prot[i];
        if (mprotect((void *)(uintptr_t)(first + (uint64_t)i * ps), ps, p) != 0) {
            int err = errno;
            for (int j = 0; j < i && rwx; j++)
                mprotect((void *)(uintptr_t)(first + (uint64_t)j * ps), ps, prot[j]);
            return err;
        }
    }
    return 0;
}

static inline void store_byte(uint64_t at, uint8_t v)
{
    __atomic_store_n((volatile uint8_t *)(uintptr_t)at, v, __ATOMIC_RELEASE);
}

int mh_text_poke(uint64_t at, const uint8_t *new_bytes, size_t len, bool interior,
                 char *why, size_t why_len)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t first = at & ~(uint64_t)(ps - 1);
    uint64_t last = (at + len - 1) & ~(uint64_t)(ps - 1);
    int npages = last == first ? 1 : 2;
    int prot[2];
    for (int i = 0; i < npages; i++) {
        prot[i] = mh_page_prot(first + (uint64_t)i * ps);
        if (prot[i] < 0) {
            snprintf(why, why_len, "page %#llx is not in /proc/self/maps",
                     (unsigned long long)(first + (uint64_t)i * ps));
            return EFAULT;
        }
    }
    int err = mh_trap_handler_ensure();
    if (err) {
        snprintf(why, why_len, "cannot install the SIGTRAP handler: %s", strerror(err));
        return err;
    }
    err = set_prot(first, npages, ps, prot, true);
    if (err) {
        snprintf(why, why_len, "the host refuses writable+executable code: mprotect(%#llx, "
                 "PROT_READ|PROT_WRITE|PROT_EXEC) failed: %s",
                 (unsigned long long)first, strerror(err));
        return err;
    }
    uint8_t old0 = *(volatile uint8_t *)(uintptr_t)at;
    store_byte(at, 0xCC);
    mh_sync_cores();
    if (interior) {
        err = quiesce(at, at + len);
        if (err) {
            store_byte(at, old0);
            mh_sync_cores();
            set_prot(first, npages, ps, prot, false);
            if (err == EAGAIN)
                snprintf(why, why_len, "no free real-time signal to probe the threads with");
            else
                snprintf(why, why_len, "a thread stayed inside the patch window at %#llx "
                         "for 2 s", (unsigned long long)at);
            return err;
        }
    }
    memcpy((void *)(uintptr_t)(at + 1), new_bytes + 1, len - 1);
    mh_sync_cores();
    store_byte(at, new_bytes[0]);
    mh_sync_cores();
    err = set_prot(first, npages, ps, prot, false);
    if (err) {
        snprintf(why, why_len, "cannot restore the protection of %#llx: %s",
                 (unsigned long long)first, strerror(err));
        return err;
    }
    return 0;
}
