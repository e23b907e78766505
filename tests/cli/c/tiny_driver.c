/*
 * tiny_driver.c - a stand-in libcuda.so.1 whose cuMemAlloc_v2 is a 3-byte
 * function (xor %eax,%eax; ret): too short for bistro's 5-byte patch.
 * `memhook info` run against it must name the refusal and show the
 * prologue bytes (31 c0 c3).  cuInit reports CUDA_ERROR_NO_DEVICE, so
 * nothing else is asked of it.
 */
__asm__(".text\n"
        ".globl cuMemAlloc_v2\n"
        ".type cuMemAlloc_v2, @function\n"
        "cuMemAlloc_v2:\n"
        "    xorl %eax, %eax\n"
        "    ret\n"
        ".size cuMemAlloc_v2, .-cuMemAlloc_v2\n");

int cuDriverGetVersion(int *version)
{
    *version = 13000;
    return 0;
}

int cuInit(unsigned flags)
{
    (void)flags;
    return 100; /* CUDA_ERROR_NO_DEVICE */
}
