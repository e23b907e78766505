"""numpy's view of ``memhook_event`` (csrc/include/memhook/memhook.h): the
one definition the in-process drain (:mod:`memhook._events.drain`, which checks it
against the C layout at import) and the trace's wire and area readers
(:mod:`memhook.tracing.protocol`) share.  numpy only: the trace collector reads
it without loading the native core."""

from __future__ import annotations

import numpy as np

__all__ = ["EVENT_DTYPE"]

EVENT_DTYPE = np.dtype({
    "names": ["seq", "address", "size", "timestamp_ns", "kind", "function", "mem_type",
              "device", "pid", "tid", "result", "flags", "caller"],
    "formats": ["<u8", "<u8", "<u8", "<u8", "<i2", "<i2", "<i2", "<i2", "<i4", "<i4", "<i4",
                "<u4", "<u8"],
    "offsets": [0, 8, 16, 24, 40, 42, 44, 46, 48, 52, 56, 60, 32],
    "itemsize": 64,
})
"""64 bytes.  ``caller`` sits at offset 32 but comes last in the field order,
so a row's first twelve items keep their places (those of trace protocol
version 2, before the caller)."""
