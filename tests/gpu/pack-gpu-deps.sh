#!/usr/bin/env bash
# pack-gpu-deps.sh: fills .deps/ for a session with a lent GPU machine (offline, no apt).
# Runs ../shared/device/pack-deps.sh (the build's libraries, FASHION=1 adds Fashion-MNIST)
# and adds what the runner needs beyond it: the JPEG and PNG decoders of the image_folder
# dataset (libjpeg62-turbo, libpng). unpack-deps.sh unpacks every .deb in .deps/debs, so
# the extra packages need nothing else on the device. Run here, in the project root, with
# /.deps/ in .git/info/exclude; then carry [".deps"] and start every device command with
# `bash tests/gpu/device_session.sh ...` (its build stage unpacks .deps).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
shared=${RUNNER_SHARED_DIR:-$root/../shared}
[ -x "$shared/device/pack-deps.sh" ] || [ -f "$shared/device/pack-deps.sh" ] || {
    echo "pack-gpu-deps.sh: $shared/device/pack-deps.sh not found (set RUNNER_SHARED_DIR)" >&2; exit 2; }
bash "$shared/device/pack-deps.sh"
extra="libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev"
(cd .deps/debs && apt-get download $extra >/dev/null 2>&1) || {
    echo "pack-gpu-deps.sh: apt-get download $extra failed (apt-get update first?)" >&2; exit 1; }
echo "added: $extra"
du -sh .deps
