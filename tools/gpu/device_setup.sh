#!/usr/bin/env bash
# Make memhook importable on a fresh device machine (source it, don't run it):
#
#     . tools/gpu/device_setup.sh
#
# The device has Python, a compiler, CUDA and the frameworks, but not cffi:
# the wheels memhook needs travel in .whl/ (see /work/.library/device/README.md
# for how they were downloaded), are unpacked into /tmp/site, and memhook is
# built in place (native tree + cffi extension) so `import memhook` works from
# the repository root.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$here"/.whl/*.whl || return 1
export PYTHONPATH=/tmp/site:$here${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
(cd "$here" && python3 setup.py -q build_ext --inplace >/tmp/memhook-build.log 2>&1) ||
    { tail -30 /tmp/memhook-build.log; return 1; }
python3 -c "import memhook; print('memhook', memhook.__version__, memhook.library_path())"
