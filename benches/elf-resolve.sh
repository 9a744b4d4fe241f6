#!/usr/bin/env bash
# Speed of ELF dependency resolution: `composer deps` against pax-utils' lddtree and
# glibc's ldd, over every ELF executable in a directory (default /usr/bin), warm cache.
#
# Usage: benches/elf-resolve.sh [--runs N] [--warmup N] [--dir DIR] [--work DIR]
#
#   --dir DIR     where the executables are (default /usr/bin; not recursive)
#   --work DIR    where the file list and the report go
#                 (default: ${TMPDIR:-/tmp}/composer-elf-bench)
#   --runs N      hyperfine runs per command (default 5)
#   --warmup N    hyperfine warmup runs (default 1)
#
# Environment: COMPOSER=path/to/composer to measure a given binary instead of
# building target/release/composer.
#
# Needs: cargo, hyperfine, ldd (libc-bin), lddtree (pax-utils, with
# python3-pyelftools for the system python3).
#
# The files: every regular file in DIR (symlinks left out, so each file counts
# once) that is executable and starts with the ELF magic, static ones included
# (every tool must at least read them). All tools get the same list, in one run:
#
#   composer deps    composer deps --root / FILE...        one process, one resolution
#   lddtree          lddtree -l FILE...                     one process (python)
#   ldd, one call    ldd FILE...                            one shell script, runs the
#                                                           loader once per file
#   ldd per file     for each FILE: ldd FILE                what a shell-script initrd
#                                                           generator does
#
# Output: hyperfine's table and summary, and WORK/report.md (table, exact command,
# date, machine) for book/src/binaries.md.

set -euo pipefail

runs=5
warmup=1
dir=/usr/bin
work="${TMPDIR:-/tmp}/composer-elf-bench"

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

die() { echo "elf-resolve.sh: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 not found${2:+ ($2)}"; }
need hyperfine "Debian package hyperfine"
need ldd "Debian package libc-bin"
need lddtree "Debian package pax-utils"

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -n "${COMPOSER:-}" ]; then
    composer="$COMPOSER"
else
    need cargo
    (cd "$repo" && cargo build --release --quiet)
    composer="$repo/target/release/composer"
fi
[ -x "$composer" ] || die "$composer is not executable"

# lddtree is a python3 script; the python3 first on PATH may lack Debian's
# pyelftools (a pyenv or virtualenv one): fall back to the system interpreter.
lddtree_bin="$(command -v lddtree)"
if lddtree -l /bin/sh >/dev/null 2>&1; then
    lddtree_cmd="$lddtree_bin"
elif /usr/bin/python3 "$lddtree_bin" -l /bin/sh >/dev/null 2>&1; then
    lddtree_cmd="/usr/bin/python3 $lddtree_bin"
else
    die "lddtree does not run (install python3-pyelftools)"
fi

mkdir -p "$work"
list="$work/files.txt"
: > "$list"
elf_magic="$(printf '\177ELF')"
for f in "$dir"/*; do
    [ -f "$f" ] && [ ! -L "$f" ] && [ -x "$f" ] || continue
    magic="$(head -c 4 "$f" 2>/dev/null || true)"
    [ "$magic" = "$elf_magic" ] && printf '%s\n' "$f" >> "$list"
done
count="$(wc -l < "$list")"
[ "$count" -gt 0 ] || die "no ELF executables in $dir"
echo "$count ELF executables in $dir"

# Sanity: composer must resolve them all (a failure would make it look fast).
xargs -d '\n' -a "$list" "$composer" deps --root / > "$work/composer.out" \
    || die "composer deps failed on the list"
echo "composer deps: $(wc -l < "$work/composer.out") paths for the image"

hyperfine --runs "$runs" --warmup "$warmup" \
    --export-markdown "$work/table.md" \
    -n "composer deps" "xargs -d '\n' -a '$list' '$composer' deps --root / > /dev/null" \
    -n "lddtree" "xargs -d '\n' -a '$list' $lddtree_cmd -l > /dev/null 2>&1 || true" \
    -n "ldd, one call" "xargs -d '\n' -a '$list' ldd > /dev/null 2>&1 || true" \
    -n "ldd per file" "xargs -d '\n' -n 1 -a '$list' ldd > /dev/null 2>&1 || true"

{
    echo "Resolving the $count ELF executables in $dir ($(date -u +%Y-%m-%d), $(nproc) CPUs, $(uname -m), warm cache):"
    echo
    cat "$work/table.md"
    echo
    echo "Produced by \`benches/elf-resolve.sh --runs $runs --warmup $warmup --dir $dir\`."
} > "$work/report.md"
echo
cat "$work/report.md"
