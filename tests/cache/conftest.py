"""The memory-type cache's tests are pure Python and need no native build."""
