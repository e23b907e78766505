"""Two threads dlopen/dlclose 100 times each while install/uninstall run."""

from __future__ import annotations


def test_dlopen_dlclose_during_install(native, reloc_build) -> None:
    exe = reloc_build.exe("stress", "stress.c", "-lmhtarget", "-lmemhook")
    proc = native.run([str(exe), str(reloc_build.dir / "libmhplugin.so")], timeout=60)
    assert "PASS stress" in proc.stdout
