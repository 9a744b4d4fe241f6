#!/usr/bin/env bash
# Resolving kernel modules: composer against one `modprobe --show-depends`
# per module, for every module under kernel/drivers/{ata,block,md,nvme,scsi,
# virtio} and kernel/fs of Debian's kernel package (with firmware lookup).
#
# composer reads the package as shipped (no modules.dep: it reads every
# module and computes the dependencies itself), once as a first run (no
# kept scan, no cache at all) and once as a later run (what the first run
# kept, checked against the unchanged tree); modprobe needs depmod's
# metadata, so it runs on a copy prepared by depmod (not timed).
#
# Usage: benches/kmod-resolve.sh [KERNEL_ROOT [DEPMOD_BASE]]
#   KERNEL_ROOT  a `dpkg -x` of Debian's linux-image package
#   DEPMOD_BASE  a base directory where `depmod -b` ran for that kernel
# Both default to the test assets `cargo test --test integration kmod_modprobe` caches
# under target/test-assets. Needs hyperfine, kmod (modprobe, depmod).
# Prints a Markdown table (also written to target/kmod-resolve.md).
set -euo pipefail

cd "$(dirname "$0")/.."
assets=target/test-assets
kroot=${1:-$(ls -d "$assets"/debian-kernel-linux-image-* 2>/dev/null | head -n1 || true)}
base=${2:-$(ls -d "$assets"/depmod-* 2>/dev/null | head -n1 || true)}
if [ -z "$kroot" ] || [ ! -d "$kroot/lib/modules" ] || [ -z "$base" ] || [ ! -d "$base/lib/modules" ]; then
    echo "kmod-resolve: no Debian kernel or depmod tree; run 'cargo test --test integration kmod_modprobe' first" >&2
    exit 1
fi
kver=$(ls "$kroot/lib/modules" | head -n1)
for tool in hyperfine modprobe; do
    command -v "$tool" >/dev/null || { echo "kmod-resolve: $tool not found" >&2; exit 1; }
done

cargo build --release --quiet
composer=$PWD/target/release/composer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/modprobe.d"

dirs=(kernel/drivers/ata kernel/drivers/block kernel/drivers/md kernel/drivers/nvme
      kernel/drivers/scsi kernel/drivers/virtio kernel/fs)
: > "$work/names"
for d in "${dirs[@]}"; do
    find "$kroot/lib/modules/$kver/$d" -name '*.ko*' -printf '%f\n' \
        | sed -e 's/\.ko.*$//' -e 's/-/_/g' >> "$work/names"
done
sort -u -o "$work/names" "$work/names"
count=$(wc -l < "$work/names")

{
    echo "root = \"$(realpath "$kroot")\""
    echo
    echo "[[module]]"
    echo "patterns = ["
    for d in "${dirs[@]}"; do echo "  \"$d/**\","; done
    echo "]"
} > "$work/scan.toml"
# The same selection through depmod's indexes (what an installed system has).
sed "s|^root = .*|root = \"$(realpath "$base")\"|" "$work/scan.toml" > "$work/indexes.toml"

{
    echo "#!/bin/sh"
    echo "while read -r m; do"
    echo "  modprobe -C '$work/modprobe.d' -d '$(realpath "$base")' -S '$kver' --show-depends \"\$m\" > /dev/null"
    echo "done < '$work/names'"
} > "$work/modprobe.sh"

export COMPOSER_CACHE_DIR="$work/cache"

# Same answer first: every module of the selection is in composer's image.
"$composer" export-list "$work/scan.toml" --kver "$kver" 2>/dev/null \
    | awk '$1 == "file" && $2 ~ /\.ko/ { n = $2; sub(/.*\//, "", n); sub(/\.ko.*$/, "", n); gsub(/-/, "_", n); print n }' \
    | sort -u > "$work/composer-names"
missing=$(comm -23 "$work/names" "$work/composer-names" | wc -l)
if [ "$missing" -ne 0 ]; then
    echo "kmod-resolve: composer left out $missing of the $count modules" >&2
    exit 1
fi

hyperfine --warmup 1 --runs "${RUNS:-10}" --style basic \
    --export-markdown "$work/table.md" \
    --prepare "rm -rf $work/cache" \
    --command-name "composer check, package as shipped, first run (reads all modules, computes deps, keeps the scan; firmware; $count modules selected)" \
    "$composer check $work/scan.toml --kver $kver" \
    --prepare true \
    --command-name "composer check, package as shipped, later runs (the kept scan, checked against the tree; firmware)" \
    "$composer check $work/scan.toml --kver $kver" \
    --prepare true \
    --command-name "composer check (depmod's indexes, firmware)" \
    "$composer check $work/indexes.toml --kver $kver" \
    --prepare true \
    --command-name "modprobe --show-depends, once per module ($count calls)" \
    "sh $work/modprobe.sh" 2>&1 | grep -v '^ *Warning' >&2

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
{
    echo "Measured $(date -u +%Y-%m-%d) on $(nproc) × ${cpu:-unknown CPU}, $(uname -m), kernel package $kver ($count modules selected)."
    echo
    cat "$work/table.md"
} | tee target/kmod-resolve.md
