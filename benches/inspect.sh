#!/usr/bin/env bash
# Reading and compressing images of Debian's kernel module tree (about 4,000 files,
# 400 MB), warm cache, in one hyperfine run:
#
#   composer inspect             composer inspect ARCHIVE                 (uncompressed)
#   3cpio -t                     3cpio -t ARCHIVE
#   composer inspect (zstd)      the same on the zstd image composer built
#   3cpio -t (zstd)              (3cpio runs `zstd -d` for it)
#   composer build (zstd -N)     composer build MANIFEST -t 0 --no-sync -o OUT: one
#                                segment, zstd level N, compressed in process
#   3cpio --create (zstd -N)     3cpio --create OUT < MANIFEST with `#cpio: zstd -N`
#                                (3cpio pipes its archive through `zstd -q -N -T0`)
#   composer extract             composer extract ARCHIVE -C DIR          (uncompressed)
#   3cpio -x                     3cpio -x -C DIR ARCHIVE
#   bsdtar -x                    bsdtar -xf ARCHIVE -C DIR
#
# Before each extraction the previous tree is removed and the page cache synced, so
# every run starts from the same state; no tool syncs what it extracts. composer checks
# the whole image first and opens every parent beneath DIR (see book/src/extract.md).
#
# Usage: benches/inspect.sh [--level N] [--runs N] [--warmup N] [--work DIR] [--kernel-root DIR]
#
#   --level N          zstd level for both creators (default 9)
#   --work DIR         where manifests and images go (default: ${TMPDIR:-/tmp}/composer-bench)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (holds lib/modules/<ver>);
#                      default: the test suite's cached one (target/test-assets), else
#                      this script downloads the current Debian kernel into the work dir
#   --runs N           hyperfine runs per command (default 10, at least 10)
#   --warmup N         hyperfine warmup runs (default 2)
#
# Needs: cargo, hyperfine, zstd (Debian package zstd), 3cpio (`cargo install threecpio
# --locked`), and for the download apt-get, apt-cache and dpkg.
#
# Both creators get the same entries (the tree with its parents lib and lib/modules,
# mtime 0, owner 0, the sources' modes), and neither syncs. Both run zstd with one
# worker per CPU: composer by default, 3cpio with -T0 (SOURCE_DATE_EPOCH is unset here).
#
# Output: hyperfine's table and summary, ratios composer/3cpio per pair, and
# WORK/inspect-report.md (table, exact command, date, machine) for book/src/segments.md.

set -euo pipefail

level=9
runs=10
warmup=2
work="${TMPDIR:-/tmp}/composer-bench"
kernel_root=""

while [ $# -gt 0 ]; do
    case "$1" in
        --level) level="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$runs" -lt 10 ]; then
    echo "--runs must be at least 10" >&2
    exit 2
fi
case "$level" in
    [1-9]|1[0-9]) ;;
    *) echo "--level must be 1 to 19" >&2; exit 2 ;;
esac

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
need cargo
need hyperfine "Debian package hyperfine"
need zstd "Debian package zstd"
need 3cpio "cargo install threecpio --locked"
need bsdtar "Debian package libarchive-tools"

mkdir -p "$work"
work="$(cd "$work" && pwd)"
export LC_ALL=C
unset SOURCE_DATE_EPOCH

# --- composer, release build -----------------------------------------------------------
build_composer

# --- Debian's module tree --------------------------------------------------------------
module_tree

# --- manifests -------------------------------------------------------------------------
plain="$work/modules-plain.toml"
zmanifest="$work/modules-zstd.toml"
m3="$work/modules-zstd.3cpio"
echo "== writing $plain, $zmanifest and $m3" >&2
cat > "$plain" <<EOF
# $tree of $(basename "$kernel_root"), one uncompressed archive
root = "$kernel_root"

[[tree]]
src = "/$tree"
EOF
cat "$plain" > "$zmanifest"
cat >> "$zmanifest" <<EOF

[[segment]]
compression = "zstd"
level = $level
EOF
{
    echo "#cpio: zstd -$level"
    printf -- '-\tlib\tdir\t755\t0\t0\t0\n'
    printf -- '-\tlib/modules\tdir\t755\t0\t0\t0\n'
    # %y type, %m octal permissions, %s size, %l symlink target; sorted on the path.
    (cd "$kernel_root" && find "$tree" -printf '%p\t%y\t%m\t%s\t%l\n') | sort -t "$(printf '\t')" -k1,1 |
        awk -F '\t' -v root="$kernel_root" '
            $2 == "f" { print root "/" $1 "\t" $1 "\tfile\t" $3 "\t0\t0\t0\t" $4; next }
            $2 == "d" { print "-\t" $1 "\tdir\t" $3 "\t0\t0\t0"; next }
            $2 == "l" { print "-\t" $1 "\tlink\t" $3 "\t0\t0\t0\t" $5; next }
            { print "unexpected file type " $2 " of " $1 > "/dev/stderr"; exit 1 }'
} > "$m3"
files=$(awk -F '\t' '$3 == "file"' "$m3" | wc -l)
bytes=$(awk -F '\t' '$3 == "file" { s += $8 } END { print s }' "$m3")

# --- images, and checks that they hold the same entries --------------------------------
archive="$work/modules.cpio"
out_c="$work/out-composer-zstd.img"
out_3="$work/out-3cpio-zstd.img"
echo "== building the images" >&2
"$composer" build "$plain" -t 0 --no-sync -o "$archive"
"$composer" build "$zmanifest" -t 0 --no-sync -o "$out_c"
3cpio --create "$out_3" < "$m3"
"$composer" verify "$out_c" > /dev/null
n_plain=$("$composer" inspect "$archive" | wc -l)
n_c=$("$composer" inspect "$out_c" | wc -l)
n_3=$(3cpio -t "$out_3" | wc -l)
n_3c=$(3cpio -t "$out_c" | wc -l)
[ "$n_plain" -eq "$n_c" ] || die "the zstd image has $n_c entries, the plain one $n_plain"
[ "$n_3" -eq "$n_c" ] || die "3cpio's image has $n_3 entries, composer's $n_c"
[ "$n_3c" -eq "$n_c" ] || die "3cpio -t lists $n_3c entries of composer's image, composer $n_c"
cmp <("$composer" inspect "$archive") <(3cpio -t "$archive") > /dev/null ||
    die "composer inspect and 3cpio -t list the archive differently"
size_plain=$(stat -c %s "$archive")
size_c=$(stat -c %s "$out_c")
size_3=$(stat -c %s "$out_3")

# --- the extractions agree -------------------------------------------------------------
X="$work/extracted"
echo "== checking that composer, 3cpio and bsdtar extract the same tree" >&2
rm -rf "$X" "$X.3cpio" "$X.bsdtar"
mkdir "$X.3cpio" "$X.bsdtar"
"$composer" extract "$archive" -C "$X"
3cpio -x -C "$X.3cpio" "$archive"
bsdtar -xf "$archive" -C "$X.bsdtar"
listing() { (cd "$1" && find . -mindepth 1 -printf '%p %y %m %s %l\n' | sort); }
for d in "$X.3cpio" "$X.bsdtar"; do
    diff -r "$X" "$d" > /dev/null || die "$d differs from composer's extraction"
    cmp <(listing "$X") <(listing "$d") > /dev/null ||
        die "types, modes or sizes in $d differ from composer's extraction"
done
rm -rf "$X" "$X.3cpio" "$X.bsdtar"

# --- warm the cache, then measure ------------------------------------------------------
(cd "$kernel_root" && find "$tree" -type f -exec cat {} + > /dev/null)
cat "$archive" "$out_c" "$out_3" > /dev/null

C="$composer"; A="$archive"; Z="$out_c"; Z3="$out_3"
names=("composer inspect" "3cpio -t"
       "composer inspect (zstd image)" "3cpio -t (zstd image)"
       "composer build (zstd -$level)" "3cpio --create (zstd -$level)"
       "composer extract" "3cpio -x" "bsdtar -x")
# No intermediate shell (-N): the listings take milliseconds. hyperfine discards the
# commands' output; 3cpio reads its manifest from stdin, so it runs under sh.
cmds=("$C inspect $A"
      "3cpio -t $A"
      "$C inspect $Z"
      "3cpio -t $Z"
      "$C build $zmanifest -t 0 --no-sync -o $Z"
      "sh -c \"3cpio --create $Z3 < $m3\""
      "$C extract $A -C $X"
      "3cpio -x -C $X $A"
      "bsdtar -xf $A -C $X")
# composer wants DIR new or empty; the others want it to exist.
fresh="sh -c \"rm -rf $X && sync\""
fresh_dir="sh -c \"rm -rf $X && mkdir $X && sync\""
prepares=(true true true true true true "$fresh" "$fresh_dir" "$fresh_dir")
md="$work/inspect-results.md"
csv="$work/inspect-results.csv"
hf=(hyperfine -N --warmup "$warmup" --runs "$runs" --export-markdown "$md" --export-csv "$csv")
for i in "${!names[@]}"; do
    hf+=(--prepare "${prepares[$i]}" -n "${names[$i]}" "${cmds[$i]}")
done
shown="hyperfine -N --warmup $warmup --runs $runs --export-markdown $md --export-csv $csv"
for i in "${!names[@]}"; do
    shown+=" \\
  --prepare '${prepares[$i]}' -n '${names[$i]}' '${cmds[$i]}'"
done
echo "== $shown" >&2
"${hf[@]}"

# --- ratios ----------------------------------------------------------------------------
# Wall time, and CPU time (user + system, children included: 3cpio's zstd), which
# other work on a shared machine disturbs less.
ratios=$(awk -F, '
    NR == 1 { next }
    { name[NR] = $1; mean[NR] = $2; median[NR] = $4; cpu[NR] = $5 + $6 }
    END {
        printf "| Pair | composer mean [s] | 3cpio mean [s] | mean ratio | median ratio | composer CPU [s] | 3cpio CPU [s] | CPU ratio |\n"
        printf "|:---|---:|---:|---:|---:|---:|---:|---:|\n"
        split("list an uncompressed archive,list a zstd image,create a zstd image,extract an uncompressed archive", pair, ",")
        for (i = 2; i < NR; i += 2) {
            printf "| %s | %.3f | %.3f | %.2f | %.2f | %.3f | %.3f | %.2f |\n", pair[i / 2],
                mean[i], mean[i + 1], mean[i] / mean[i + 1], median[i] / median[i + 1],
                cpu[i], cpu[i + 1], cpu[i] / cpu[i + 1]
        }
    }' "$csv")
echo
echo "composer / 3cpio (below 1: composer is faster or uses less CPU):"
echo "$ratios"

# --- report ----------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
fstype=$(df --output=fstype "$work" | tail -n 1 | tr -d ' ')
report="$work/inspect-report.md"
{
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) CPUs ($cpu), work directory on $fstype, $(uname -sr)."
    echo
    echo "Input: \`$tree\` of Debian's $(basename "$kernel_root" | sed 's/^debian-kernel-//'), $files files, $bytes bytes; the uncompressed archive is $size_plain bytes, composer's zstd -$level image $size_c bytes, 3cpio's $size_3 bytes."
    echo
    echo "Tools: composer $("$composer" --version | awk '{print $2}') (release build), $(3cpio --version), zstd $(zstd --version | sed -n 's/.* v\([0-9.]*\).*/\1/p')."
    echo
    echo '```sh'
    echo "benches/inspect.sh --level $level --runs $runs --warmup $warmup"
    echo "# which runs:"
    echo "$shown" | sed "s|$work|\$WORK|g; s|$repo/|./|g"
    echo '```'
    echo
    sed "s|$work|\$WORK|g; s|$repo|.|g" "$md"
    echo
    echo "$ratios"
} > "$report"
echo
rm -rf "$X"
echo "Report for book/src/segments.md: $report"
