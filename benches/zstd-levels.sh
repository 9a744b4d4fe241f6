#!/usr/bin/env bash
# Size and time of the generic image (the default configuration: the generic profile
# for one kernel and module tree) at each zstd level, to choose the level a zstd
# segment gets when it names none. One hyperfine run of `composer build` per level,
# warm cache, no fsync (the figures are the compressor's), with the encoder's threads
# at their default (one per core).
#
# Usage: benches/zstd-levels.sh [--runs N] [--levels "1 3 ..."] [--cold] [--work DIR] [--kernel-root DIR]
#
#   --runs N           hyperfine runs per level (default 3; level 19 takes a minute)
#   --levels LIST      the levels (default "1 2 3 4 6 9 12 15 19")
#   --cold             drop the page cache before every run (root): programs, libraries
#                      and modules are read from disk
#   --work DIR         where the images go (default: ${TMPDIR:-/tmp}/composer-zstd-levels)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (default: the test suite's
#                      cached one, else the current Debian kernel is downloaded)
#
# Needs: cargo, hyperfine, python3, depmod (kmod).
# Output: hyperfine's table and WORK/report.md: level, mean time, image size, size
# against level 19 and time against level 3, for book/src/segments.md.

set -euo pipefail

runs=3
levels="1 2 3 4 6 9 12 15 19"
work="${TMPDIR:-/tmp}/composer-zstd-levels"
kernel_root=
cold=false
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --levels) levels="$2"; shift 2 ;;
        --cold) cold=true; shift ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        *) echo "usage: $0 [--runs N] [--levels LIST] [--cold] [--work DIR] [--kernel-root DIR]" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
need hyperfine "Debian package hyperfine"
need python3
build_composer
module_tree
drop=true
! $cold || cold_cache

hf=(hyperfine --warmup 0 --runs "$runs" --export-json "$work/times.json")
for l in $levels; do
    cat >"$work/level-$l.toml" <<TOML
include = ["generic"]

[[segment]]
name = "main"
compression = "zstd"
level = $l
TOML
    hf+=(-n "$l" --prepare "rm -f $work/level-$l.img && $drop"
        "$composer -q build $work/level-$l.toml --kver $kver --kmoddir $kernel_root/$tree -o $work/level-$l.img --no-sync")
done
"${hf[@]}" >&2

COLD="$($cold && echo " --cold" || true)" python3 - "$work" "$runs" "$kver" "$levels" <<'PY'
import json, os, sys
work, runs, kver, levels = sys.argv[1:5]
levels = levels.split()
res = {r["command"]: r for r in json.load(open(f"{work}/times.json"))["results"]}
size = {l: os.path.getsize(f"{work}/level-{l}.img") for l in levels}
ref_size = size.get("19", max(size.values()))
ref_time = res["3"]["mean"] if "3" in res else min(r["mean"] for r in res.values())
rows = ["| level | build, mean ± σ | image | size vs level 19 | time vs level 3 |",
        "|---:|---:|---:|---:|---:|"]
for l in levels:
    r = res[l]
    rows.append(f"| {l} | {r['mean']:.3f} ± {r['stddev']:.3f} s | {size[l] / 1e6:.2f} MB | "
                f"{size[l] / ref_size:.3f}x | {r['mean'] / ref_time:.2f}x |")
table = "\n".join(rows)
with open(f"{work}/report.md", "w") as f:
    f.write(f"`benches/zstd-levels.sh --runs {runs}{os.environ.get('COLD', '')}`, the generic image of {kver}\n\n{table}\n")
print(table)
PY
