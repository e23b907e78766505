"""The simulated CUDA stack reaching the driver through dlopen + dlsym +
cuGetProcAddress: each variant maps to exactly its own wrapper; the runtime,
shared and linked statically into the executable, with memhook installed
first, sees its cuMemAlloc_v2/cuMemFree_v2 reach the replacements."""

from __future__ import annotations


def test_get_proc_address_variants(native, reloc_build) -> None:
    exe = reloc_build.exe("gpa_driver", "gpa_driver.c", "-lmemhook")
    proc = native.run([str(exe)], timeout=30)
    assert "DONE failures=0" in proc.stdout, proc.stdout


def test_shared_runtime(native, reloc_build) -> None:
    exe = reloc_build.exe("cuda_app_shared", "cuda_app.c", "-lmhcudahooks",
                          f"-L{native.sim_dir}", "-l:libcudart.so.13",
                          f"-Wl,-rpath,{native.sim_dir}")
    proc = native.run([str(exe)], timeout=30)
    assert "alloc_calls=1 free_calls=1" in proc.stdout, proc.stdout


def test_static_runtime(native, reloc_build) -> None:
    exe = reloc_build.exe("cuda_app_static", "cuda_app.c", "-lmhcudahooks",
                          str(native.sim_dir / "libcudart_static.a"))
    proc = native.run([str(exe)], timeout=30)
    assert "alloc_calls=1 free_calls=1" in proc.stdout, proc.stdout
