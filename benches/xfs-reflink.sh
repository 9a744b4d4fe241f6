#!/usr/bin/env bash
# Speed of composer against 3cpio when the data is aligned and shared: Debian's module
# tree (about 4,000 files, 400 MB) on XFS with reflink, archives written to the same
# filesystem with 4 KiB data alignment, durable and not, in one hyperfine run.
#
# Usage: benches/xfs-reflink.sh [--runs N] [--warmup N] [--cold] [--work DIR] [--kernel-root DIR]
#
#   --runs N           hyperfine runs per command (default 10)
#   --warmup N         hyperfine warmup runs (default 2)
#   --cold             drop the page cache before every run (`echo 3 >
#                      /proc/sys/vm/drop_caches`): sources and metadata come from disk
#   --work DIR         where the XFS image and the lists go (default:
#                      ${TMPDIR:-/tmp}/composer-xfs-bench)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (default: the test suite's
#                      cached one, else the current Debian kernel is downloaded)
#
# Needs root (a loop mount), mkfs.xfs (xfsprogs), hyperfine, 3cpio (`cargo install
# threecpio --locked`), cargo, and for the download apt-get, apt-cache and dpkg.
#
# The tree is copied onto a fresh 4 GiB XFS image (mkfs.xfs -m reflink=1) mounted on a
# loop device. Every command writes a fresh path on that filesystem (the output is
# removed and the removal synced before each run, as a kernel update writes a new file):
#
#   composer manifest      composer build -a 4096 -t 0 -o OUT tree.toml   (one [[tree]])
#   composer --list        composer build -a 4096 -t 0 -o OUT --list LIST  (gen_init_cpio list)
#   3cpio                  3cpio --create --data-align 4096 OUT < MANIFEST
#   each with --no-sync, and 3cpio followed by `sync OUT` for the durable rows.
#
# Exits non-zero when, warm, durable composer (either input) is not at most 0.6x 3cpio +
# sync (cold runs are reported, not judged: reading the tree from disk dominates them).
# Output: hyperfine's table, WORK/report.md for book/src/benchmarks.md.

set -euo pipefail

runs=10
warmup=2
cold=false
work="${TMPDIR:-/tmp}/composer-xfs-bench"
kernel_root=
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --cold) cold=true; shift ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
[ "$(id -u)" -eq 0 ] || die "needs root (it mounts an XFS image on a loop device)"
need mkfs.xfs "Debian package xfsprogs"
need hyperfine "Debian package hyperfine"
need 3cpio "cargo install threecpio --locked"
build_composer
module_tree

# --- an XFS filesystem with reflink, unmounted on any exit ----------------------------
img="$work/xfs.img"
mnt="$work/mnt"
cleanup() {
    if mountpoint -q "$mnt"; then umount "$mnt" || umount -l "$mnt"; fi
    rm -f "$img"
}
trap cleanup EXIT
cleanup
mkdir -p "$mnt"
truncate -s 4G "$img"
mkfs.xfs -q -f -m reflink=1 "$img"
mount -o loop "$img" "$mnt"   # the loop device is detached on umount (autoclear)
echo "== copying $tree onto XFS" >&2
src="$mnt/src"
mkdir -p "$src/lib/modules"
cp -a "$kernel_root/$tree" "$src/lib/modules/"
out="$mnt/out"
mkdir -p "$out"

list="$work/modules.list"
manifest="$work/modules.manifest"
tree_lists "$src" "$list" "$manifest"
toml="$work/tree.toml"
printf '[[tree]]\nsrc = "%s/%s"\ndst = "/%s"\n' "$src" "$tree" "$tree" > "$toml"
files=$(grep -c '^file ' "$list")
bytes=$(awk -F '\t' '$3 == "file" { s += $8 } END { print s }' "$manifest")

# --- sound archives, and composer's shares its data ----------------------------------
C="$composer"
OM="$out/composer-manifest.cpio"; OL="$out/composer-list.cpio"; O3="$out/3cpio.cpio"
"$C" build -q -a 4096 -t 0 -o "$OM" "$toml"
"$C" build -q -a 4096 -t 0 -o "$OL" --list "$list"
3cpio --create --data-align 4096 "$O3" < "$manifest"
for o in "$OM" "$OL"; do
    "$C" verify -q "$o" || die "$o does not verify"
done
n3=$(3cpio --list "$O3" | wc -l)
nl=$(3cpio --list "$OL" | wc -l)
[ "$n3" -eq "$nl" ] || die "3cpio's archive has $n3 entries, composer's $nl"
sync
# What the archives take on disk beyond what they share (xfs_io reports shared extents).
own_kib() {
    xfs_io -r -c 'fiemap -v' "$1" | python3 -c '
import sys
kib = 0
for line in sys.stdin.readlines()[2:]:
    f = line.split()
    if len(f) >= 5 and f[2] != "hole" and not int(f[-1], 16) & 0x2000:  # FIEMAP_EXTENT_SHARED
        kib += int(f[-2]) // 2
print(kib)'
}
sizes="composer manifest: $(du -k --apparent-size "$OM" | cut -f1) KiB, $(own_kib "$OM") KiB not shared; composer --list: $(du -k --apparent-size "$OL" | cut -f1) KiB, $(own_kib "$OL") KiB not shared; 3cpio: $(du -k --apparent-size "$O3" | cut -f1) KiB, $(own_kib "$O3") KiB not shared"
echo "== $sizes" >&2

# --- measure ------------------------------------------------------------------------------
drop_tail=""
if $cold; then
    cold_cache
else
    cat "$list" > /dev/null
    (cd "$src" && find "$tree" -type f -exec cat {} + > /dev/null)
fi
names=("composer manifest --no-sync" "composer --list --no-sync" "3cpio"
       "composer manifest (fsync + rename)" "composer --list (fsync + rename)" "3cpio + sync")
cmds=("$C build -q -a 4096 -t 0 --no-sync -o $OM $toml"
      "$C build -q -a 4096 -t 0 --no-sync -o $OL --list $list"
      "3cpio --create --data-align 4096 $O3 < $manifest"
      "$C build -q -a 4096 -t 0 -o $OM $toml"
      "$C build -q -a 4096 -t 0 -o $OL --list $list"
      "3cpio --create --data-align 4096 $O3 < $manifest && sync $O3")
outs=("$OM" "$OL" "$O3" "$OM" "$OL" "$O3")
md="$work/results.md"
csv="$work/results.csv"
hf=(hyperfine --warmup "$warmup" --runs "$runs" --export-markdown "$md" --export-csv "$csv")
shown="hyperfine --warmup $warmup --runs $runs"
for i in "${!names[@]}"; do
    hf+=(-n "${names[$i]}" --prepare "rm -f ${outs[$i]} && sync$drop_tail" "${cmds[$i]}")
    shown+=" \\
  -n '${names[$i]}' --prepare 'rm -f ${outs[$i]} && sync$drop_tail' '${cmds[$i]}'"
done
echo "== $shown" >&2
"${hf[@]}" >&2

ratios=$(awk -F, '
    NR == 1 { next }
    { name[NR] = $1; mean[NR] = $2 }
    END {
        printf "| Command | mean [s] | vs 3cpio (same durability) |\n|:---|---:|---:|\n"
        for (i = 2; i <= NR; i++) {
            base = (i <= 4) ? 4 : 7
            printf "| %s | %.3f | %.2fx |\n", name[i], mean[i], mean[i] / mean[base]
        }
    }' "$csv")
echo "$ratios"
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) CPUs ($cpu), a 4 GiB XFS image (reflink=1) on a loop device, $(uname -sr)."
    echo
    echo "Input: \`$tree\` of Debian's $(basename "$kernel_root" | sed 's/^debian-kernel-//'), $files files, $bytes bytes, copied onto the XFS image."
    echo
    echo "Tools: composer $("$composer" --version | awk '{print $2}') (release build), $(3cpio --version)."
    echo
    echo "Archives: $sizes."
    echo
    echo '```sh'
    echo "benches/xfs-reflink.sh --runs $runs --warmup $warmup$($cold && echo " --cold")"
    echo "# which runs:"
    echo "$shown" | sed "s|$mnt|\$XFS|g; s|$work|\$WORK|g; s|$repo/|./|g"
    echo '```'
    echo
    sed "s|$mnt|\$XFS|g; s|$work|\$WORK|g; s|$repo|.|g" "$md"
    echo
    echo "$ratios"
} > "$work/report.md"
echo "Report for book/src/benchmarks.md: $work/report.md" >&2

missed=$($cold || awk -F, 'NR > 1 { mean[NR] = $2 } END {
    if (mean[5] > 0.6 * mean[7]) printf "manifest %.2fx ", mean[5] / mean[7]
    if (mean[6] > 0.6 * mean[7]) printf "--list %.2fx ", mean[6] / mean[7]
}' "$csv")
if [ -n "$missed" ]; then
    echo "missed: durable composer at most 0.6x 3cpio + sync: $missed" >&2
    exit 1
fi
