/*
 * nofp.S - nofp_alloc(void **p, size_t n, uintptr_t garbage): calls
 * cudaMalloc(p, n) with %rbp holding `garbage`, as code built with
 * -fomit-frame-pointer may: a stack walk that reaches this frame finds no
 * frame chain, and must stop there without faulting.
 */
    .text
    .globl nofp_alloc
    .type nofp_alloc, @function
nofp_alloc:
    push %rbp
    push %rbx
    sub $8, %rsp
    mov %rdx, %rbp
    call cudaMalloc@PLT
    add $8, %rsp
    pop %rbx
    pop %rbp
    ret
    .size nofp_alloc, .-nofp_alloc
    .section .note.GNU-stack,"",@progbits
