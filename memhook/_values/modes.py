"""The hook mechanisms a process can use: :class:`HookMode`.

``MEMHOOK_CUDA_MODE`` and ``memhook.install(mode=...)`` take a bitmask of
mechanisms: ``bistro`` (patch the driver's entry
points), ``reloc`` (rewrite GOT slots, ``dlsym`` and ``cuGetProcAddress``
answers), both (the default), or ``none``.  :meth:`HookMode.parse` reads the
same grammar as the core's ``memhook_mode_parse``, so a value means the same
thing whether the LD_PRELOADed core or Python reads it.

Pure Python, no native code: importable on its own.
"""

from __future__ import annotations

import enum
import os

__all__ = ["ENV_VAR", "VALID_MODES", "HookMode"]

ENV_VAR = "MEMHOOK_CUDA_MODE"
"""The environment variable that picks the mode when ``install()`` gets None."""

VALID_MODES = ("none, bistro, reloc, a comma list of them (e.g. 'bistro,reloc'), "
               "or an integer 0-3")
"""What an error message lists as the valid values."""

_WORDS = {"none": 0, "bistro": 1, "reloc": 2}
_BLANKS = " \t\n\v\f\r"
_DIGITS = "0123456789"
_ALL = 3


class HookMode(enum.IntFlag):
    """A set of hook mechanisms: ``NONE``, ``BISTRO``, ``RELOC`` or both.

    ``str()`` gives the spelling :meth:`parse` reads back ("bistro,reloc",
    "none")."""

    NONE = 0
    BISTRO = 1
    RELOC = 2

    @classmethod
    def default(cls) -> HookMode:
        """``BISTRO | RELOC``: what an unset ``MEMHOOK_CUDA_MODE`` means."""
        return cls.BISTRO | cls.RELOC

    @classmethod
    def parse(cls, value: str | int | HookMode | None = None) -> HookMode:
        """The mode ``value`` names.

        * None: the environment variable ``MEMHOOK_CUDA_MODE``, or the
          default (``BISTRO | RELOC``) when it is unset or blank;
        * a string: ``"none"``, ``"bistro"``, ``"reloc"``, a comma list of
          those (``"bistro,reloc"``), or an integer ``"0"``-``"3"``;
          case-insensitive, blanks around tokens allowed; ``""`` is the
          default;
        * an int (or a HookMode): 0-3.

        Anything else raises ValueError naming the bad token and the valid
        values (TypeError for a value that is neither text nor an int)."""
        if value is None:
            text = os.environ.get(ENV_VAR)
            if text is None:
                return cls.default()
            return cls._parse_text(text, f"{ENV_VAR}={text!r}")
        if isinstance(value, cls):
            return cls._from_int(int(value), repr(value))
        if isinstance(value, bool):
            raise TypeError(f"a hook mode must be text or an int 0-3, not a bool ({value!r})")
        if isinstance(value, int):
            return cls._from_int(value, repr(value))
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("ascii")
            except UnicodeDecodeError:
                raise ValueError(f"hook mode {bytes(value)!r} is not ASCII; valid values: "
                                 f"{VALID_MODES}") from None
        if isinstance(value, str):
            return cls._parse_text(value, repr(value))
        raise TypeError(f"a hook mode must be text or an int 0-3, not {type(value).__name__}")

    @classmethod
    def _from_int(cls, number: int, shown: str) -> HookMode:
        if not 0 <= number <= _ALL:
            raise ValueError(f"hook mode {shown}: {number} is out of range; valid values: "
                             f"{VALID_MODES}")
        return cls(number)

    @classmethod
    def _parse_text(cls, text: str, shown: str) -> HookMode:
        # Blanks are C's isspace() set: the core's parser must agree.
        stripped = text.strip(_BLANKS)
        if not stripped:
            return cls.default()
        if stripped[0] in _DIGITS:
            if len(stripped) != 1 or stripped > "3":
                raise ValueError(f"hook mode {shown}: bad token {stripped!r}; valid values: "
                                 f"{VALID_MODES}")
            return cls(int(stripped))
        bits = 0
        for raw in stripped.split(","):
            token = raw.strip(_BLANKS)
            bit = _WORDS.get(token.lower()) if token.isascii() else None
            if bit is None:
                what = "empty token" if not token else f"bad token {token!r}"
                raise ValueError(f"hook mode {shown}: {what}; valid values: {VALID_MODES}")
            bits |= bit
        return cls(bits)

    def __str__(self) -> str:
        if not self:
            return "none"
        return ",".join(name for name, bit in _WORDS.items() if bit and self & bit)
