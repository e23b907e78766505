/* resume_pc.c - what csrc/core/procfs.c's mh_task_resume_pc says of three
 * threads (tests/core/test_procfs.py checks it):
 *   parked   blocked in read() on a pipe: "parked 0 <syscall-before-pc>"
 *            (the two bytes before the pc are the syscall instruction);
 *   spinner  spinning, never parked: "spinner <errno>" (EAGAIN, "running",
 *            also when it is preempted: a runnable thread is not located);
 *   gone     a thread id that exited: "gone <errno>" (ESRCH).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "procfs.h"

static int pipefd[2];
static atomic_int tid_parked, tid_spinner, tid_gone, stop;

static void *parked(void *arg)
{
    (void)arg;
    atomic_store(&tid_parked, (int)syscall(SYS_gettid));
    char c;
    while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void *spinner(void *arg)
{
    (void)arg;
    atomic_store(&tid_spinner, (int)syscall(SYS_gettid));
    volatile unsigned long x = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        x++;
    return NULL;
}

static void *gone(void *arg)
{
    (void)arg;
    atomic_store(&tid_gone, (int)syscall(SYS_gettid));
    return NULL;
}

int main(void)
{
    pthread_t a, b, c;
    if (pipe(pipefd) != 0 || pthread_create(&a, NULL, parked, NULL) != 0 ||
        pthread_create(&b, NULL, spinner, NULL) != 0 ||
        pthread_create(&c, NULL, gone, NULL) != 0)
        return 2;
    pthread_join(c, NULL);
    while (!atomic_load(&tid_parked) || !atomic_load(&tid_spinner))
        ;
    uint64_t pc = 0;
    int rc = EAGAIN;
    /* until the parked thread has reached read() */
    for (int i = 0; i < 5000 && rc == EAGAIN; i++) {
        rc = mh_task_resume_pc(atomic_load(&tid_parked), &pc, NULL);
        if (rc == EAGAIN)
            usleep(1000);
    }
    unsigned insn = 0;
    if (rc == 0)
        insn = (unsigned)((const unsigned char *)(uintptr_t)pc)[-2] << 8 |
               ((const unsigned char *)(uintptr_t)pc)[-1];
    printf("parked %d %04x\n", rc, insn);
    int spin = 0;
    for (int i = 0; i < 100; i++) {
        spin = mh_task_resume_pc(atomic_load(&tid_spinner), &pc, NULL);
        if (spin != EAGAIN)
            break;
    }
    printf("spinner %d\n", spin);
    printf("gone %d\n", mh_task_resume_pc(atomic_load(&tid_gone), &pc, NULL));
    atomic_store(&stop, 1);
    if (write(pipefd[1], "x", 1) != 1)
        return 2;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
