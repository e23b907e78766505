"""Shared data of the reloc tests (imported as ``from reloc_testing import
...``: a unique module name, since several test folders have a conftest.py)."""

from __future__ import annotations

__all__ = ["GOT_VARIANTS"]

# name -> extra flags for got_driver (compiler + linker)
GOT_VARIANTS = {
    "pie_lazy_partial": ["-fPIE", "-pie", "-Wl,-z,lazy", "-Wl,-z,relro"],
    "pie_now_full": ["-fPIE", "-pie", "-Wl,-z,now", "-Wl,-z,relro"],
    "nopie_lazy_partial": ["-fno-pie", "-no-pie", "-Wl,-z,lazy", "-Wl,-z,relro"],
    "nopie_now_full": ["-fno-pie", "-no-pie", "-Wl,-z,now", "-Wl,-z,relro"],
    "pie_fnoplt_now_full": ["-fPIE", "-pie", "-fno-plt", "-Wl,-z,now", "-Wl,-z,relro"],
    "pie_fnoplt_lazy_partial": ["-fPIE", "-pie", "-fno-plt", "-Wl,-z,lazy", "-Wl,-z,relro"],
}
