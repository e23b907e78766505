"""The package version; csrc/include/memhook/memhook.h carries the same."""

__all__ = ["__version__"]

__version__ = "0.1.0"
