/*
 * interpose_x86_64.S - entry stubs for dlsym and dlvsym.
 *
 * glibc's dlsym/dlvsym identify the calling object by their return address
 * (RTLD_NEXT, and the scope RTLD_DEFAULT searches).  For a name memhook
 * does not hook, the stub must therefore reach the real function with the
 * caller's return address still on top of the stack: it saves the argument
 * registers, asks C whether the name is hooked, restores them, and
 * tail-jumps through mh_real_dlsym / mh_real_dlvsym.  For a hooked name it
 * jumps to the C handler with the caller's return address as an extra
 * argument, and the handler returns straight to the caller.
 */
    .text

    .globl  mh_dlsym_entry
    .hidden mh_dlsym_entry
    .type   mh_dlsym_entry, @function
mh_dlsym_entry:
    .cfi_startproc
    endbr64
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    subq    $8, %rsp                /* 16-byte alignment for the call */
    .cfi_adjust_cfa_offset 8
    movq    %rsi, %rdi
    call    mh_dl_name_hooked
    addq    $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testl   %eax, %eax
    jnz     1f
    jmp     *mh_real_dlsym(%rip)    /* caller's return address intact */
1:
    movq    (%rsp), %rdx            /* caller = our return address */
    jmp     mh_dlsym_hooked
    .cfi_endproc
    .size   mh_dlsym_entry, .-mh_dlsym_entry

    .globl  mh_dlvsym_entry
    .hidden mh_dlvsym_entry
    .type   mh_dlvsym_entry, @function
mh_dlvsym_entry:
    .cfi_startproc
    endbr64
    pushq   %rdi
    .cfi_adjust_cfa_offset 8
    pushq   %rsi
    .cfi_adjust_cfa_offset 8
    pushq   %rdx                    /* three pushes: aligned for the call */
    .cfi_adjust_cfa_offset 8
    movq    %rsi, %rdi
    call    mh_dl_name_hooked
    popq    %rdx
    .cfi_adjust_cfa_offset -8
    popq    %rsi
    .cfi_adjust_cfa_offset -8
    popq    %rdi
    .cfi_adjust_cfa_offset -8
    testl   %eax, %eax
    jnz     1f
    jmp     *mh_real_dlvsym(%rip)
1:
    movq    (%rsp), %rcx
    jmp     mh_dlvsym_hooked
    .cfi_endproc
    .size   mh_dlvsym_entry, .-mh_dlvsym_entry

    .section .note.GNU-stack,"",@progbits
