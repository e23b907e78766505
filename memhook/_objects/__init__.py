"""The process's loaded objects, read from outside the core: the one
/proc/PID/maps reader, the driver's soname, ELF symbols and where a stripped
object's debug information went.

Modules: ``procmaps``, ``sonames``, ``symbolize``, ``debuginfo``.
"""
