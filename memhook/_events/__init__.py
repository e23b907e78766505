"""Events out of the core: the event's layout, the drain and its background
feeder, what events do to a MemtypeCache, and the steps an exception from a
signal handler cannot split.

Modules: ``layout``, ``drain``, ``feeder``, ``apply``, ``atomic``.
"""
