#!/usr/bin/env bash
# Sets up a Debian 12 machine for optmem (packages, build) and runs its main jobs:
#   setup.sh demo   build, then run a bundled PyTorch training workload under optmem
#   setup.sh test   build, then run the whole test suite
#   setup.sh build  install the packages and build into build/
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${OPTMEM_BUILD_DIR:-$here/build}

packages=(
    build-essential cmake pkg-config git
    uthash-dev libcmocka-dev libdw-dev libjansson-dev
    python3 python3-torch python3-torchvision python3-numpy libopenblas0-openmp
    libpython3.11-testsuite
    python3-sklearn python3-xgboost python3-skorch python3-torchaudio python3-fasttext
    fasttext darknet
    libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
    clang-format chromium python3-pil
    cppcheck clang libclang-rt-14-dev
    dpkg-dev
)

install_packages() {
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "optmem setup: installing ${missing[*]}" >&2
    local sudo=
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build_all() {
    install_packages
    cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j"$(nproc)"
}

case "${1:-}" in
build)
    build_all
    ;;
test)
    build_all
    cd "$build"
    ctest --output-on-failure -j"$(nproc)" "${@:2}"
    ;;
demo)
    build_all
    exec "$here/tools/demo.sh" "$build" "${@:2}"
    ;;
*)
    echo "usage: $0 demo|test|build" >&2
    exit 2
    ;;
esac
