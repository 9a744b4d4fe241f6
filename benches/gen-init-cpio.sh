#!/usr/bin/env bash
# Speed of `composer gen-init-cpio` against the kernel's usr/gen_init_cpio (6.12) and
# 3cpio, on Debian's kernel module tree (about 4,000 files, 400 MB), warm cache.
#
# Usage: benches/gen-init-cpio.sh [--runs N] [--warmup N] [--cold] [--work DIR] [--kernel-root DIR]
#
#   --work DIR         where lists and archives go (default: ${TMPDIR:-/tmp}/composer-bench);
#                      the benchmark measures writing to this directory's filesystem
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (holds lib/modules/<ver>);
#                      default: the test suite's cached one (target/test-assets), else
#                      this script downloads the current Debian kernel into the work dir
#   --runs N           hyperfine runs per command (default 10, at least 10)
#   --warmup N         hyperfine warmup runs (default 2)
#   --cold             drop the page cache before every run (`echo 3 >
#                      /proc/sys/vm/drop_caches`, as root): every source is read from disk
#
# Needs: cargo, cc, tar, xz, hyperfine, 3cpio (`cargo install threecpio --locked`),
# /usr/src/linux-source-6.12.tar.xz (Debian package linux-source-6.12), and for the
# download apt-get, apt-cache and dpkg.
#
# The list is what usr/gen_initramfs.sh makes of a directory: `find` output sorted in
# the C locale (parents before children), `<type> <name> [<location>] <mode> <uid> <gid>`
# lines, names under /lib/modules/<ver>. 3cpio gets an equivalent tab-separated manifest
# with every field given (so it does not stat for them either).
#
# Commands compared (all with mtime 0 for every entry):
#   gen_init_cpio          gen_init_cpio -t 0 LIST > OUT        (6.12: stdout, no fsync)
#   gen_init_cpio + sync   ... && sync OUT                       (durable)
#   composer --no-sync     composer gen-init-cpio -t 0 --no-sync -o OUT LIST
#   composer               composer gen-init-cpio -t 0 -o OUT LIST  (fsync + rename)
#   3cpio                  3cpio --create OUT < MANIFEST
#   3cpio + sync           ... && sync OUT                       (durable)
#   dd                     dd of as many zero bytes as the archive has (the device's own
#   dd conv=fsync          speed, without and with fsync: the floor of a durable write)
#
# Output: hyperfine's table and summary, ratios against gen_init_cpio, and
# WORK/report.md (table, exact command, date, machine) for book/src/benchmarks.md.

set -euo pipefail

runs=10
warmup=2
work="${TMPDIR:-/tmp}/composer-bench"
kernel_root=""
cold=false

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
if [ "$runs" -lt 10 ]; then
    echo "--runs must be at least 10" >&2
    exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
need cargo
need cc "Debian package gcc"
need tar
need xz "Debian package xz-utils"
need hyperfine "Debian package hyperfine"
need 3cpio "cargo install threecpio --locked"

mkdir -p "$work"
work="$(cd "$work" && pwd)"
export LC_ALL=C

# --- composer, release build -----------------------------------------------------------
build_composer

# --- the kernel's gen_init_cpio 6.12 ---------------------------------------------------
linux_src=/usr/src/linux-source-6.12.tar.xz
[ -f "$linux_src" ] || die "$linux_src not found (Debian package linux-source-6.12)"
gen="$work/gen_init_cpio"
if [ ! -x "$gen" ]; then
    echo "== building gen_init_cpio from $linux_src" >&2
    tar -xJf "$linux_src" --wildcards '*/usr/gen_init_cpio.c' -O > "$work/gen_init_cpio.c"
    cc -O2 -o "$gen" "$work/gen_init_cpio.c"
fi

# --- Debian's module tree --------------------------------------------------------------
module_tree

# --- the list and the manifest ---------------------------------------------------------
list="$work/modules.list"
manifest="$work/modules.manifest"
echo "== writing $list and $manifest" >&2
tree_lists "$kernel_root" "$list" "$manifest"
files=$(grep -c '^file ' "$list")
bytes=$(awk -F '\t' '$3 == "file" { s += $8 } END { print s }' "$manifest")

# --- check that everyone makes a sound archive -----------------------------------------
out_gen="$work/out-gen_init_cpio.cpio"
out_composer="$work/out-composer.cpio"
out_3cpio="$work/out-3cpio.cpio"
echo "== checking outputs" >&2
"$gen" -t 0 "$list" > "$out_gen"
"$composer" gen-init-cpio -t 0 -o "$out_composer" "$list"
3cpio --create "$out_3cpio" < "$manifest"
cmp "$out_gen" "$out_composer" || die "composer's archive differs from gen_init_cpio's"
n3=$(3cpio --list "$out_3cpio" | wc -l)
ng=$(3cpio --list "$out_gen" | wc -l)
[ "$n3" -eq "$ng" ] || die "3cpio archive has $n3 entries, gen_init_cpio's $ng"

# --- warm the cache (or drop it before every run), then measure ------------------------
drop_tail=""
if $cold; then
    cold_cache
else
    cat "$list" > /dev/null
    (cd "$kernel_root" && find "$tree" -type f -exec cat {} + > /dev/null)
fi

G="$gen"; C="$composer"; L="$list"; M="$manifest"
OG="$out_gen"; OC="$out_composer"; O3="$out_3cpio"; OD="$work/out-dd"
mib=$(( ($(stat -c %s "$out_gen") + (1 << 20) - 1) >> 20 ))
DD="dd if=/dev/zero of=$OD bs=1M count=$mib status=none"
names=("gen_init_cpio" "composer --no-sync" "3cpio" "dd"
       "gen_init_cpio + sync" "composer (fsync + rename)" "3cpio + sync" "dd conv=fsync")
cmds=("$G -t 0 $L > $OG"
      "$C gen-init-cpio -t 0 --no-sync -o $OC $L"
      "3cpio --create $O3 < $M"
      "$DD"
      "$G -t 0 $L > $OG && sync $OG"
      "$C gen-init-cpio -t 0 -o $OC $L"
      "3cpio --create $O3 < $M && sync $O3"
      "$DD conv=fsync")
md="$work/results.md"
csv="$work/results.csv"
# Each run writes a fresh path, as a kernel update does: the output is removed and the
# removal synced before it (overwriting the previous archive would hide the cost of
# fsync on ext4).
outs=("$OG" "$OC" "$O3" "$OD" "$OG" "$OC" "$O3" "$OD")
hf=(hyperfine --warmup "$warmup" --runs "$runs" --export-markdown "$md" --export-csv "$csv")
for i in "${!names[@]}"; do
    hf+=(-n "${names[$i]}" --prepare "rm -f ${outs[$i]} && sync$drop_tail" "${cmds[$i]}")
done
# The command line as one would type it (the paths contain no single quotes).
shown="hyperfine --warmup $warmup --runs $runs --export-markdown $md --export-csv $csv"
for i in "${!names[@]}"; do
    shown+=" \\
  -n '${names[$i]}' --prepare 'rm -f ${outs[$i]} && sync$drop_tail' '${cmds[$i]}'"
done
echo "== $shown" >&2
"${hf[@]}"

# --- ratios ----------------------------------------------------------------------------
ratios=$(awk -F, '
    NR == 1 { next }
    { name[NR] = $1; mean[NR] = $2 }
    END {
        printf "| Command | mean [s] | vs gen_init_cpio (same durability) | vs composer (same durability) |\n"
        printf "|:---|---:|---:|---:|\n"
        for (i = 2; i <= NR; i++) {
            base = (i <= 5) ? 2 : 6        # first four: not durable; last four: durable
            comp = (i <= 5) ? 3 : 7
            printf "| %s | %.3f | %.2fx | %.2fx |\n", name[i], mean[i], mean[i] / mean[base], mean[i] / mean[comp]
        }
        printf "\nWhat durability costs (durable / not durable): composer %.2fx, dd %.2fx; durable composer / dd conv=fsync %.2fx\n", mean[7] / mean[3], mean[9] / mean[5], mean[7] / mean[9]
    }' "$csv")
echo
echo "Ratios of mean times (below 1 is faster):"
echo "$ratios"

# --- report ----------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
fstype=$(df --output=fstype "$work" | tail -n 1 | tr -d ' ')
report="$work/report.md"
{
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) CPUs ($cpu), work directory on $fstype, $(uname -sr)."
    echo
    echo "Input: \`$tree\` of Debian's $(basename "$kernel_root" | sed 's/^debian-kernel-//'), $files files, $bytes bytes."
    echo
    echo "Tools: composer $("$composer" --version | awk '{print $2}') (release build), gen_init_cpio from linux-source-6.12 (cc -O2), $(3cpio --version)."
    echo
    echo '```sh'
    echo "benches/gen-init-cpio.sh --runs $runs --warmup $warmup$($cold && echo " --cold")"
    echo "# which runs:"
    echo "$shown" | sed "s|$work|\$WORK|g; s|$repo/|./|g"
    echo '```'
    echo
    sed "s|$work|\$WORK|g; s|$repo|.|g" "$md"
    echo
    echo "$ratios"
} > "$report"
echo
echo "Report for book/src/benchmarks.md: $report"
