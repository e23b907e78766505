"""The queries a user makes of the core's process cache: the argument forms,
the process cache as a MemtypeCache, searches over a snapshot, and what was
reserved before the hooks.

Modules: ``query``, ``inputs``, ``search``, ``process_cache``,
``preexisting``.
"""
