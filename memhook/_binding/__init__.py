"""The bridge to native code: memhook's core (libmemhook.so and the cffi
extension), its long control calls, its hook table, CUDA's driver asked
directly, and the names of CUDA's error codes.

Modules: ``core``, ``control``, ``hook_table``, ``driver``, ``cuda_errors``.
"""
