#!/usr/bin/env bash
# Static analysis of the project's C code with cppcheck; fails on any finding not suppressed.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/hardening
dirs=()
for d in common preload tracer replanner tools cuda tests bench; do
    [ -d "$d" ] && dirs+=("$d")
done
exec cppcheck --quiet -j2 --std=c11 --error-exitcode=1 --inline-suppr \
    --enable=warning,portability,performance \
    --suppressions-list="$here/cppcheck.supp" \
    -D_GNU_SOURCE -Iinclude -Icommon -Ipreload -Itracer -Ireplanner -Itools -Itests/replanner \
    "${dirs[@]}"
