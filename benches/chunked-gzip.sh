#!/usr/bin/env bash
# gzip -9 on every core: Debian's module tree built by composer as one gzip -9
# segment in 16 MiB pieces (chunk_size), against single-threaded `gzip -9` of the
# same archive (the uncompressed image of the same manifest), and composer's own
# single-stream gzip -9, in one hyperfine run, warm cache, no fsync. Sizes beside.
#
# Usage: benches/chunked-gzip.sh [--runs N] [--cold] [--work DIR] [--kernel-root DIR]
#
#   --runs N           hyperfine runs per command (default 3)
#   --cold             drop the page cache before every run (root): the tree is read
#                      from disk
#   --work DIR         where the images go (default: ${TMPDIR:-/tmp}/composer-chunked-gzip)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (default: the test suite's
#                      cached one, else the current Debian kernel is downloaded)
#
# Needs: cargo, hyperfine, gzip, python3.
# Output: hyperfine's table and WORK/report.md for book/src/segments.md. Exits non-zero
# when the pieces are not at least 1.8x faster than gzip -9 or more than 1% larger.

set -euo pipefail

runs=3
work="${TMPDIR:-/tmp}/composer-chunked-gzip"
kernel_root=
cold=false
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --cold) cold=true; shift ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--cold] [--work DIR] [--kernel-root DIR]" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
need hyperfine "Debian package hyperfine"
need gzip
need python3
build_composer
module_tree
drop=true
! $cold || cold_cache

segment() {
    printf '[[tree]]\nsrc = "%s/%s"\ndst = "/%s"\n\n[[segment]]\nname = "main"\n%s\n' \
        "$kernel_root" "$tree" "$tree" "$1"
}
segment 'compression = "none"' > "$work/none.toml"
segment "$(printf 'compression = "gzip"\nlevel = 9')" > "$work/one.toml"
segment "$(printf 'compression = "gzip"\nlevel = 9\nchunk_size = 16777216')" > "$work/pieces.toml"
"$composer" -q build "$work/none.toml" -t 0 --no-sync -o "$work/archive.cpio"

hyperfine --runs "$runs" --export-json "$work/times.json" \
    -n "composer, gzip -9 in 16 MiB pieces" --prepare "rm -f $work/pieces.img && $drop" \
    "$composer -q build $work/pieces.toml -t 0 --no-sync -o $work/pieces.img" \
    -n "gzip -9 of the same archive" --prepare "rm -f $work/archive.cpio.gz && $drop" \
    "gzip -9 -n -c $work/archive.cpio > $work/archive.cpio.gz" \
    -n "composer, gzip -9 one stream" --prepare "rm -f $work/one.img && $drop" \
    "$composer -q build $work/one.toml -t 0 --no-sync -o $work/one.img" >&2

COLD="$($cold && echo " --cold" || true)" python3 - "$work" "$runs" "$kver" "$(nproc)" <<'PY'
import json, os, sys
work, runs, kver, cpus = sys.argv[1:5]
res = json.load(open(f"{work}/times.json"))["results"]
size = {
    "composer, gzip -9 in 16 MiB pieces": os.path.getsize(f"{work}/pieces.img"),
    "gzip -9 of the same archive": os.path.getsize(f"{work}/archive.cpio.gz"),
    "composer, gzip -9 one stream": os.path.getsize(f"{work}/one.img"),
}
ref = next(r for r in res if r["command"].startswith("gzip"))
rows = ["| command | mean ± σ | vs gzip -9 | size | vs gzip -9 |", "|:---|---:|---:|---:|---:|"]
for r in res:
    s = size[r["command"]]
    rows.append(f"| {r['command']} | {r['mean']:.2f} ± {r['stddev']:.2f} s | "
                f"{ref['mean'] / r['mean']:.2f}x faster | {s:,} | {s / size[ref['command']]:.4f}x |")
table = "\n".join(rows)
with open(f"{work}/report.md", "w") as f:
    f.write(f"`benches/chunked-gzip.sh --runs {runs}{os.environ.get('COLD', '')}`, the module tree of {kver}, {cpus} CPUs\n\n{table}\n")
print(table)
pieces = res[0]
speed = ref["mean"] / pieces["mean"]
grew = size[pieces["command"]] / size[ref["command"]]
if speed < 1.8 or grew > 1.01:
    print(f"missed: {speed:.2f}x faster (target 1.8x), size {grew:.4f}x (target 1.01x)", file=sys.stderr)
    sys.exit(1)
PY
