"""The values every layer shares and imports nothing of memhook for:
MemoryType and Region, HookMode and its grammar, a program's names made
printable.

Modules: ``types``, ``modes``, ``printable``.
"""
