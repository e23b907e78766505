"""The core's memory-type cache (csrc/cache/): these tests need the native
build (libmemhook.so) and, for the program test, a C compiler."""
