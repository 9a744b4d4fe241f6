#!/usr/bin/env bash
# The cost side of sharing: on XFS (reflink=1) an aligned image shares its data
# extents with its sources, so a later in-place write to the image pays a
# copy-on-write remap and fragments the file. This builds the module tree's image
# twice on a fresh loop-mounted XFS, shared (the default) and copied
# (`--no-reflink`), then runs the same random-write load on each with fio and
# counts the extents before and after.
#
# Usage: benches/reflink-cow.sh [--runtime S] [--work DIR] [--kernel-root DIR]
#
#   --runtime S        seconds of random writes per image (default 20)
#   --work DIR         where the filesystem image goes (default: ${TMPDIR:-/tmp}/composer-reflink-cow)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (default: the test suite's
#                      cached one, else the current Debian kernel is downloaded)
#
# Needs: root, cargo, hyperfine, fio, mkfs.xfs (xfsprogs), filefrag (e2fsprogs),
# losetup and mount (util-linux).
# The fio job: 4 KiB random writes, O_DIRECT, psync, one job, over the whole image,
# for the runtime given; the same job on both images, one after the other.
# Output: WORK/report.md for book/src/planner.md.

set -euo pipefail

runtime=20
work="${TMPDIR:-/tmp}/composer-reflink-cow"
kernel_root=
while [ $# -gt 0 ]; do
    case "$1" in
        --runtime) runtime="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        *) echo "usage: $0 [--runtime S] [--work DIR] [--kernel-root DIR]" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$work"
work="$(cd "$work" && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"
[ "$(id -u)" = 0 ] || die "needs root (loop mounts)"
need hyperfine "Debian package hyperfine"
need fio "Debian package fio"
need mkfs.xfs xfsprogs
need filefrag e2fsprogs
build_composer
module_tree

fsimg="$work/xfs.img"
mnt="$work/mnt"
cleanup() {
    mountpoint -q "$mnt" && umount "$mnt" || true
    for dev in $(losetup -j "$fsimg" | cut -d: -f1); do losetup -d "$dev" || true; done
    rm -f "$fsimg"
}
trap cleanup EXIT
cleanup
mkdir -p "$mnt"
truncate -s 3G "$fsimg"
mkfs.xfs -q -f -m reflink=1 "$fsimg"
mount -o loop "$fsimg" "$mnt"

echo "== copying the module tree onto XFS" >&2
mkdir -p "$mnt/src"
cp -a "$kernel_root/$tree" "$mnt/src/"
sync -f "$mnt/src"
cat >"$mnt/tree.toml" <<TOML
[defaults]
align = 4096

[[tree]]
src = "$mnt/src/$kver"
dst = "/$tree"
TOML

hyperfine --runs 5 --export-json "$work/build.json" \
    -n shared --prepare "rm -f $mnt/shared.img && sync" "$composer -q build $mnt/tree.toml -o $mnt/shared.img" \
    -n copied --prepare "rm -f $mnt/copied.img && sync" "$composer -q build $mnt/tree.toml --no-reflink -o $mnt/copied.img" >&2
cmp "$mnt/shared.img" "$mnt/copied.img" || die "the two images differ"

extents() { filefrag "$1" | sed -n 's/.*: \([0-9]*\) extents\{0,1\} found/\1/p'; }
declare -A before after iops
for img in shared copied; do
    sync -f "$mnt/$img.img"
    before[$img]=$(extents "$mnt/$img.img")
    fio --name="$img" --filename="$mnt/$img.img" --rw=randwrite --bs=4k --direct=1 \
        --ioengine=psync --numjobs=1 --time_based --runtime="$runtime" --randrepeat=1 \
        --random_generator=tausworthe64 --norandommap --output-format=json \
        --output="$work/fio-$img.json" >/dev/null
    iops[$img]=$(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['jobs'][0]['write']['iops']))" "$work/fio-$img.json")
    sync -f "$mnt/$img.img"
    after[$img]=$(extents "$mnt/$img.img")
done

python3 - "$work" "$runtime" "$kver" "${before[shared]}" "${after[shared]}" "${iops[shared]}" \
    "${before[copied]}" "${after[copied]}" "${iops[copied]}" <<'PY'
import json, sys
work, runtime, kver, bs, as_, is_, bc, ac, ic = sys.argv[1:10]
res = {r["command"]: r for r in json.load(open(f"{work}/build.json"))["results"]}
rows = ["| image | build (durable), mean ± σ | extents after build | 4 KiB random writes (O_DIRECT) | extents after writes |",
        "|:---|---:|---:|---:|---:|"]
for name, b, a, i in (("shared (default)", bs, as_, is_), ("copied (`--no-reflink`)", bc, ac, ic)):
    r = res["shared" if name.startswith("shared") else "copied"]
    rows.append(f"| {name} | {r['mean']:.3f} ± {r['stddev']:.3f} s | {int(b):,} | {int(i):,} IOPS | {int(a):,} |")
table = "\n".join(rows)
with open(f"{work}/report.md", "w") as f:
    f.write(f"`benches/reflink-cow.sh --runtime {runtime}`, the module tree of {kver} on XFS (reflink=1), 4 KiB alignment\n\n{table}\n")
print(table)
PY
