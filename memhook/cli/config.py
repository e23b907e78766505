"""``memhook config [--cflags] [--libs] [--includes] [--libdir] [--pkgconfigdir]``

Where a C program finds memhook's C API, as ``python3-config`` and
``pkg-config`` say it for theirs::

    cc $(memhook config --cflags) prog.c $(memhook config --libs) -ldl -lpthread
    PKG_CONFIG_PATH=$(memhook config --pkgconfigdir) pkg-config --cflags --libs memhook

* ``--cflags``: ``-I<includes>``, so ``#include <memhook/memhook.h>`` builds;
* ``--libs``: ``-L<libdir> -Wl,-rpath,<libdir> -lmemhook``: the program finds
  the core it was linked against at run time without ``LD_LIBRARY_PATH``;
* ``--includes``, ``--libdir``, ``--pkgconfigdir``: the bare folders (the
  headers' parent, ``libmemhook.so``'s folder, ``memhook.pc``'s folder).

The flags print in the order given, on one line, as ``python3-config``'s do.
The folders are this install's: the package's own (``memhook.library_path()``'s
folder); ``memhook.pc`` names them relative to itself, so an installed
package that moves stays right.  A flag not listed above, or none at all, is
a usage error (status 2) naming the valid ones; an install that lacks the
headers or the .pc (a build from before they were shipped) is status 1,
saying what to reinstall.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["FLAGS", "add_parser", "folders", "run"]

FLAGS = ("--cflags", "--libs", "--includes", "--libdir", "--pkgconfigdir")
USAGE = f"memhook config {' '.join(f'[{f}]' for f in FLAGS)}"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "config", usage=USAGE, allow_abbrev=False, help="compiler and linker flags for memhook's C API",
        description="Print the flags (or folders) a C program needs to include "
                    "<memhook/memhook.h> and link libmemhook.so, in the order asked.")
    helps = {"--cflags": "-I<includes>", "--libs": "-L<libdir> -Wl,-rpath,<libdir> -lmemhook",
             "--includes": "the folder holding memhook/memhook.h",
             "--libdir": "the folder holding libmemhook.so",
             "--pkgconfigdir": "the folder holding memhook.pc (for PKG_CONFIG_PATH)"}
    for flag in FLAGS:  # (append_const: printed in the order given)
        p.add_argument(flag, dest="flags", action="append_const", const=flag, help=helps[flag])
    p.set_defaults(func=run)
    return p


def folders() -> dict[str, str]:
    """This install's folders: ``includes`` (holding ``memhook/memhook.h``),
    ``libdir`` (holding ``libmemhook.so``), ``pkgconfigdir`` (holding
    ``memhook.pc``)."""
    from .. import library_path

    libdir = os.path.dirname(library_path())
    return {"includes": os.path.join(libdir, "include"), "libdir": libdir,
            "pkgconfigdir": os.path.join(libdir, "pkgconfig")}


def _usage(message: str) -> int:
    print(f"memhook config: {message}; valid: {', '.join(FLAGS)}\nusage: {USAGE}",
          file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    flags = list(args.flags or ())
    if not flags:
        return _usage("name at least one flag")
    where = folders()
    needed = {"includes": os.path.join(where["includes"], "memhook", "memhook.h"),
              "pkgconfigdir": os.path.join(where["pkgconfigdir"], "memhook.pc")}
    for path in needed.values():
        if not os.path.isfile(path):
            print(f"memhook config: {path} is missing from this install (built before the "
                  f"C API's files were shipped); reinstall memhook", file=sys.stderr)
            return 1
    libdir = where["libdir"]
    words = {"--cflags": f"-I{where['includes']}",
             "--libs": f"-L{libdir} -Wl,-rpath,{libdir} -lmemhook",
             "--includes": where["includes"], "--libdir": libdir,
             "--pkgconfigdir": where["pkgconfigdir"]}
    print(" ".join(words[f] for f in flags))
    return 0
