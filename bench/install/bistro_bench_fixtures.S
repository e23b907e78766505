/* bistro_bench_fixtures.S - 40 distinct functions with the cudart
 * push/mov prologue (bench_fn0 .. bench_fn39), each returning a + b + n. */
        .text
        .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39
        .globl bench_fn\n
        .type bench_fn\n, @function
        .p2align 4
bench_fn\n:
        push    %rbp
        mov     %rsp, %rbp
        push    %r15
        lea     \n(%rdi,%rsi,1), %rax
        pop     %r15
        pop     %rbp
        ret
        .size bench_fn\n, . - bench_fn\n
        .endr
        .section .note.GNU-stack,"",@progbits
