#!/usr/bin/env bash
# How the alignment planner scales: plan 10k, 100k and 1M directories, and
# 10k, 100k, 200k and 1M files whose sizes are drawn from a module tree,
# each in its own process; prints seconds and peak memory (MiB).
#
#   benches/plan-scale.sh [MODULE_DIR]
#
# MODULE_DIR defaults to the Debian module tree the test suite caches.
set -euo pipefail
cd "$(dirname "$0")/.."
mods=${1:-$(ls -d target/test-assets/debian-kernel-*/lib/modules/*/ 2>/dev/null | head -n 1)}
if [ -z "$mods" ] || [ ! -d "$mods" ]; then
    echo "no module tree: pass one, or run the test suite once to fetch Debian's kernel" >&2
    exit 1
fi
sizes=$(mktemp)
trap 'rm -f "$sizes"' EXIT
find "$mods" -type f -name '*.ko*' -printf '%s\n' > "$sizes"
cargo bench --bench plan_scale --no-run >/dev/null 2>&1
bin=$(ls -t target/release/deps/plan_scale-* | grep -v '\.d$' | head -n 1)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "sizes: $(wc -l < "$sizes") files from $mods"
printf '| entries | kind | alignment | seconds | peak MiB | records | misses |\n|---:|---|---:|---:|---:|---:|---:|\n'
for spec in "dirs 10000" "dirs 100000" "dirs 1000000" \
            "files 10000" "files 100000" "files 200000" "files 1000000"; do
    set -- $spec
    for align in 4096 65536; do
        # shellcheck disable=SC2086
        out=$("$bin" "$1" "$2" "$sizes" "$align")
        IFS=$'\t' read -r kind n secs mib records misses size <<< "$out"
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$kind" "$align" "$secs" "$mib" "$records" "$misses"
    done
done
