"""A newcomer's first contact, as the README tells it: in a fresh copy of the
checkout, README command 1 (a venv, the install, ``memhook demo``), then the
README's Python quick start pasted into ``python`` in that same folder, the
clone's root, where Python imports the source tree before any installed copy.

Both the command and the quick start are read from README.md, so the test
follows the README as it is edited.  Command 1 reaches the package index, as
the README's test command (CI's) does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def readme_install_command() -> str:
    """README command 1: the line after the ``# 1.`` comment of its first sh block."""
    m = re.search(r"^```sh\n# 1\.[^\n]*\n([^\n]+)\n```", README.read_text(), re.M)
    assert m, "README.md has no '# 1.' command in a sh block"
    return m.group(1)


def readme_quick_start() -> str:
    """The python block of the README's "Python quick start" section."""
    section = README.read_text().split("\n## Python quick start\n", 1)
    assert len(section) == 2, "README.md has no 'Python quick start' section"
    m = re.search(r"^```python\n(.*?)^```", section[1], re.M | re.S)
    assert m, "the 'Python quick start' section has no python block"
    return m.group(1)


def promised_lines(code: str) -> list[re.Pattern[str]]:
    """What the quick start's comments say its prints show, in order: the
    comment after ``print(...)`` up to a ``: `` that starts an explanation,
    ``...`` standing for any text (as in a doctest)."""
    promises = []
    for line in code.splitlines():
        m = re.match(r"\s*print\(.*\)\s+#\s+(.*)$", line)
        if m:
            shown = m.group(1).split(": ", 1)[0]
            promises.append(re.compile(".*".join(map(re.escape, shown.split("...")))))
    return promises


def copy_checkout(dest: Path) -> Path:
    """The checkout's files as a fresh clone has them: tracked or not ignored,
    so no build output (no native parts in memhook/, no venv)."""
    proc = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                           "--exclude-standard"], capture_output=True, check=True, timeout=60)
    for rel in filter(None, proc.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():  # (a tracked file deleted in the work tree is left out)
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    assert not list((dest / "memhook").rglob("*.so")), "the copy holds built native parts"
    return dest


def newcomer_env() -> dict[str, str]:
    """A shell of someone who just cloned: not inside this test's venv, no
    memhook settings, no PYTHONPATH (the index settings and caches stay)."""
    venv_bin = os.path.join(sys.prefix, "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MEMHOOK_", "PYTHON")) and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.realpath(p) != os.path.realpath(venv_bin))
    return env


def test_readme_quick_start_runs_in_the_clone_after_command_1(tmp_path: Path) -> None:
    clone = copy_checkout(tmp_path / "memhook")
    env = newcomer_env()
    install = subprocess.run(["bash", "-c", f"set -euo pipefail; {readme_install_command()}"],
                             cwd=clone, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=1500)
    assert install.returncode == 0, (f"README command 1 failed ({install.returncode}):\n"
                                     f"{install.stdout[-3000:]}\n{install.stderr[-3000:]}")

    code = readme_quick_start()
    run = subprocess.run(["bash", "-c", ". .venv/bin/activate && python -"], input=code,
                         cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"the quick start failed in {clone}:\n{run.stderr[-3000:]}"
    out = run.stdout.splitlines()
    at = 0
    for promise in promised_lines(code):
        while at < len(out) and not promise.fullmatch(out[at]):
            at += 1
        assert at < len(out), f"no line {promise.pattern!r} in the quick start's output:\n{run.stdout}"
        at += 1
