/*
 * emit.c - turning a completed (or starting) call into an event.
 *
 * pid and tid are cached: getpid() and gettid() are system calls, which
 * would cost more than the rest of the hook.  fork() refreshes both (the
 * queue's atfork child handler calls mh_emit_after_fork_child).
 */
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda_hooks.h"
#include "log.h"

/* Process-wide by nature: the pid of this process, refreshed in a fork
 * child.  0 until first needed. */
static _Atomic int32_t g_pid;
/* Per thread: this thread's kernel tid, 0 until first needed. */
static __thread int32_t t_tid __attribute__((tls_model("initial-exec")));

static int32_t current_pid(void)
{
    int32_t pid = atomic_load_explicit(&g_pid, memory_order_relaxed);
    if (pid == 0) {
        pid = (int32_t)getpid();
        atomic_store_explicit(&g_pid, pid, memory_order_relaxed);
    }
    return pid;
}

static int32_t current_tid(void)
{
    if (t_tid == 0)
        t_tid = (int32_t)syscall(SYS_gettid);
    return t_tid;
}

void mh_emit_after_fork_child(void)
{
    atomic_store(&g_pid, (int32_t)getpid());
    t_tid = 0;
}

static uint64_t push(int kind, mh_fn f, uint64_t addr, uint64_t size, int mem_type, int device,
                     int result, uint32_t flags)
{
    uint64_t stamp = mh_clock_stamp(&flags);  /* before the initialiser reads flags */
    memhook_event ev = {
        .address = addr,
        .size = size,
        .timestamp_ns = stamp,
        .kind = kind,
        .function = (int32_t)f,
        .mem_type = mem_type,
        .device = device,
        .pid = current_pid(),
        .tid = current_tid(),
        .result = result,
        .flags = flags,
    };
    return mh_queue_push(&ev);
}

void mh_emit_alloc(mh_fn f, int result, uint64_t addr, uint64_t size, int mem_type, int device)
{
    if (device == MH_DEVICE_CURRENT)
        device = mh_current_device();
    if (result != 0)
        addr = 0;
    /* The live record first: its CAS would otherwise wait for the event
     * slot's stores (a line the drainer last read) to leave the store
     * buffer.  No FREE of addr can race it: the caller does not have addr
     * until we return. */
    if (result == 0 && addr != 0 && mh_hooks[f].tracked) {
        mh_live rec = {.size = size, .mem_type = mem_type, .device = device};
        mh_live_insert(addr, &rec);
    }
    push(MEMHOOK_EVENT_ALLOC, f, addr, size, mem_type, device, result, 0);
}

void mh_free_begin(mh_fn f, uint64_t addr, uint64_t given_size, mh_free_plan *plan)
{
    plan->addr = addr;
    plan->flags = 0;
    plan->from_table = mh_live_take(addr, &plan->rec);
    plan->known = plan->from_table;
    if (!plan->known) {
        uint64_t base = 0, size = 0;
        plan->rec.mem_type = mh_hooks[f].mem_type;
        plan->rec.device = -1;
        if (mh_driver_range(addr, &base, &size) && base == addr) {
            plan->known = true;
            plan->rec.size = size;
            mh_queue_note_free_source(true, false);
        } else {
            plan->rec.size = 0;
        }
    }
    if (given_size != 0) {
        /* The call names its range (cuMemUnmap): that is what goes away. */
        plan->rec.size = given_size;
        plan->known = true;
    }
    if (plan->rec.size == 0) {
        plan->flags |= MEMHOOK_EVENT_SIZE_UNKNOWN;
        mh_queue_note_free_source(false, true);
    }
    if (plan->known)
        push(MEMHOOK_EVENT_FREE, f, addr, plan->rec.size, plan->rec.mem_type, plan->rec.device,
             0, plan->flags);
}

void mh_free_end(mh_fn f, const mh_free_plan *plan, int result)
{
    if (!plan->known) {
        push(MEMHOOK_EVENT_FREE, f, plan->addr, plan->rec.size, plan->rec.mem_type,
             plan->rec.device, result, plan->flags);
        return;
    }
    if (result != 0) {
        /* Announced before the call, and the driver refused it: the memory
         * is still allocated, so keep knowing it. */
        mh_debug("%s(0x%llx) failed with %d after its FREE was announced", mh_hooks[f].name,
                 (unsigned long long)plan->addr, result);
        if (plan->from_table)
            mh_live_insert(plan->addr, &plan->rec);
    }
}

int mh_unresolved(mh_fn f)
{
    mh_error("%s: the real function is not known yet; returning an error", mh_hooks[f].name);
    return mh_hooks[f].api == MEMHOOK_API_DRIVER ? CUDA_ERROR_NOT_FOUND : 500;
}

uint64_t memhook_events_record(int kind, int function, uint64_t address, uint64_t size,
                               int mem_type, int device, int result)
{
    return push(kind, (mh_fn)function, address, size, mem_type, device, result, 0);
}
