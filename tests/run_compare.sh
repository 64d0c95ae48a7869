#!/usr/bin/env bash
# Runs a program without optmem and under LD_PRELOAD in every mode; each run must exit 0
# and print exactly what the plain run printed.
set -u
lib=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
env -u LD_PRELOAD "$@" >"$work/plain.out" 2>"$work/plain.err" || {
    echo "FAIL: the program fails without optmem"; cat "$work/plain.out" "$work/plain.err"; exit 1; }
status=0
for mode in off trace plan; do
    if ! env LD_PRELOAD="$lib" OPTMEM_MODE=$mode OPTMEM_REPORT="$work/report.%p.json" \
        "$@" >"$work/$mode.out" 2>"$work/$mode.err"; then
        echo "FAIL: mode $mode exited non-zero"; cat "$work/$mode.out" "$work/$mode.err"; status=1
    elif ! diff -u "$work/plain.out" "$work/$mode.out"; then
        echo "FAIL: mode $mode printed something else than the plain run"; status=1
    else
        echo "ok: mode $mode matches the plain run ($(wc -l <"$work/$mode.out") lines)"
    fi
done
exit $status
