"""GOT rewriting in PIE / non-PIE executables, lazy and now binding, partial
and full RELRO, -fno-plt: hooked calls, idempotent install, protections
restored (checked in /proc/self/maps), dlsym and dlopen interposition, the
caller's RUNPATH, uninstall."""

from __future__ import annotations

import pytest
from reloc_testing import GOT_VARIANTS

EXPECTED = {
    "baseline", "install", "original_resolved", "call_hooked", "slots_counted",
    "protections_restored", "install_twice", "dlsym_default_hooked", "dlsym_next_hooked",
    "dlsym_handle_hooked", "dlvsym_handle_unversioned_hooked", "dlsym_default_unhooked",
    "dlsym_next_unhooked_from_exe", "dlsym_next_unhooked_from_lib",
    "dlsym_next_hooked_from_lib_none", "dlsym_missing", "dlsym_of_dlsym_is_interposed",
    "dlopen_plugin", "dlopen_plugin_hooked", "dlopen_dependency_hooked",
    "dlopen_caller_runpath", "runpath_lib_hooked", "dlclose_plugin", "call_after_dlclose",
    "uninstall", "call_restored", "slots_zero", "dlsym_restored",
    "protections_after_uninstall", "runpath_lib_restored",
}


def _info(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("INFO "):
            key, _, value = line[5:].partition("=")
            out[key] = value
    return out


@pytest.mark.parametrize("variant", sorted(GOT_VARIANTS))
def test_got_variant(native, reloc_build, got_driver, variant: str) -> None:
    exe = got_driver(variant)
    proc = native.run([str(exe), str(reloc_build.dir / "libmhplugin.so")], timeout=30)
    passed = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PASS ")}
    assert EXPECTED <= passed, proc.stdout
    info = _info(proc.stdout)
    full = "now" in variant
    # Full RELRO: .got.plt is read-only after the rewrite; partial: it stays
    # writable, as the loader left it.  .got (GLOB_DAT) is RELRO in both.
    if info["pltgot_perms"] != "none":
        assert info["pltgot_perms"].startswith("r--p" if full else "rw-p"), info
    assert info["got_perms"].startswith("r--p"), info
    # A function pointer taken before install is not covered in a PIE: it
    # holds the definition's address.  A non-PIE executable's pointer is its
    # canonical PLT entry, which jumps through the rewritten slot.
    assert info["early"] == ("102" if variant.startswith("nopie") else "2"), info
