/*
 * ucx_stub_driver.c - bench/common/hook_bench_stub_driver.c (a libcuda.so.1 whose
 * alloc+free pair costs a few ns) with its four allocation entry points in
 * the shape of NVIDIA's, for bench/ucx/ucx_side_by_side.py --driver stub.
 *
 * Why: UCX's bistro decodes only the few instructions a compiler's classic
 * frame setup is made of, and refuses anything else - the whole CUDA hook
 * install fails on the first refusal, so UCX's bistro mode could not be
 * measured at all on a machine without a GPU.  libcuda 580's entries all
 * begin `push rbp; mov rbp,rsp; push r12; sub rsp,8`
 * (as recorded from libcuda 580's exports); here each exported entry is
 * that prologue followed by a call to the stub's C body, so both UCX's
 * bistro and memhook's have the real driver's first bytes to move.
 *
 * The C bodies keep their code; only their names change (they stay
 * exported, which nothing looks up).
 */
#define cuMemAlloc_v2 ucx_stub_body_cuMemAlloc_v2
#define cuMemFree_v2 ucx_stub_body_cuMemFree_v2
#define cuMemAllocAsync ucx_stub_body_cuMemAllocAsync
#define cuMemFreeAsync ucx_stub_body_cuMemFreeAsync
#include "../common/hook_bench_stub_driver.c"
#undef cuMemAlloc_v2
#undef cuMemFree_v2
#undef cuMemAllocAsync
#undef cuMemFreeAsync

/* At entry rsp is 8 mod 16; after the two pushes and the sub it is 0 mod 16
 * again, as the call needs.  The argument registers are untouched, so the
 * body sees the caller's arguments; its result comes back in eax. */
#define NV_SHAPED_ENTRY(name)                                                         \
    __asm__(".pushsection .text\n"                                                                 \
            ".globl " #name "\n"                                                      \
            ".type " #name ", @function\n" #name ":\n"                                \
            "    push %rbp\n"                                                         \
            "    mov %rsp, %rbp\n"                                                    \
            "    push %r12\n"                                                         \
            "    sub $8, %rsp\n"                                                      \
            "    call ucx_stub_body_" #name "@PLT\n"                                      \
            "    add $8, %rsp\n"                                                      \
            "    pop %r12\n"                                                          \
            "    pop %rbp\n"                                                          \
            "    ret\n"                                                               \
            ".size " #name ", . - " #name "\n"                                       \
            ".popsection\n")

NV_SHAPED_ENTRY(cuMemAlloc_v2);
NV_SHAPED_ENTRY(cuMemFree_v2);
NV_SHAPED_ENTRY(cuMemAllocAsync);
NV_SHAPED_ENTRY(cuMemFreeAsync);
