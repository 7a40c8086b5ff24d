#!/usr/bin/env bash
# pack-gpu-deps.sh: fills .deps/ for a session with a lent GPU machine (offline, no apt).
# Runs ../shared/device/pack-deps.sh (the build's libraries: oneDNN, OpenBLAS, libyaml,
# curl, libjpeg-turbo, libpng; with FASHION=1, the default here, Fashion-MNIST's test
# split and 12,000 training images into .deps/fashion-mnist) and makes sure the image
# decoders' packages are there, then adds:
#   .deps/device_session.sh   a shim that runs the tree's tests/gpu/device_session.sh
#   .deps/commit.txt          the commit packed (the device copy of the tree has no .git)
# Run here, in the project root, with /.deps/ in .git/info/exclude:
#     echo /.deps/ >> .git/info/exclude; bash tests/gpu/pack-gpu-deps.sh
# then the device call: carry [".deps"], timeout_s 560, command
#     bash .deps/device_session.sh
# (docs/benchmarks.md, "GPU session"). FASHION=0 leaves Fashion-MNIST out (its stage
# then reports it missing). About 40 MB.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
shared=${RUNNER_SHARED_DIR:-$root/../shared}
[ -f "$shared/device/pack-deps.sh" ] || {
    echo "pack-gpu-deps.sh: $shared/device/pack-deps.sh not found (set RUNNER_SHARED_DIR)" >&2; exit 2; }
FASHION=${FASHION:-1} bash "$shared/device/pack-deps.sh"
extra="libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev"
missing=""
for p in $extra; do compgen -G ".deps/debs/${p}_*.deb" >/dev/null || missing="$missing $p"; done
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    (cd .deps/debs && apt-get download $missing >/dev/null 2>&1) || {
        echo "pack-gpu-deps.sh: apt-get download$missing failed (apt-get update first?)" >&2; exit 1; }
    echo "added:$missing"
fi
cat >.deps/device_session.sh <<'EOF'
#!/usr/bin/env bash
# written by tests/gpu/pack-gpu-deps.sh: runs the tree's session script (the tree travels
# with .deps; this copy only saves typing the path)
exec bash "$(cd "$(dirname "$0")/.." && pwd)/tests/gpu/device_session.sh" "$@"
EOF
git describe --always --dirty --abbrev=12 >.deps/commit.txt 2>/dev/null || echo unknown >.deps/commit.txt
echo "packed for commit $(cat .deps/commit.txt)"
du -sh .deps
