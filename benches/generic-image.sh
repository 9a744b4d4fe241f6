#!/usr/bin/env bash
# Time to build the generic image (an initrd for any PC, VM or server) for one kernel
# and module tree: `composer build` (the default configuration: the generic profile)
# against `dracut --no-hostonly` and Debian's `mkinitramfs` with MODULES=most, on the
# same machine in one run. Uncompressed, and with each tool's default compression;
# image sizes and entry counts beside the times.
#
# Usage: benches/generic-image.sh [--runs N] [--peer-runs N] [--work DIR] [--kernel-root DIR]
#
#   --work DIR         where the images go (default: ${TMPDIR:-/tmp}/composer-generic-bench)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (lib/modules/<ver>, boot/config-<ver>);
#                      default: the test suite's cached one (target/test-assets), else
#                      this script downloads the current Debian kernel into the work dir
#   --runs N           hyperfine runs of each composer command (default 10)
#   --peer-runs N      hyperfine runs of each dracut and mkinitramfs command (default 2;
#                      0: composer alone, without dracut and mkinitramfs installed)
#
# Needs: root, cargo, hyperfine, unshare (util-linux), depmod (kmod), zstd, dracut
# (Debian package dracut-core), mkinitramfs (initramfs-tools), and for the download
# apt-get, apt-cache and dpkg.
#
# Every tool reads this machine's root for its programs and libraries and the kernel
# tree for modules: composer and dracut through --kmoddir; mkinitramfs only knows
# /lib/modules/<ver> and /boot/config-<ver>, so every peer command runs in a private
# mount namespace where the tree is bind-mounted there (nothing on the machine
# changes). Before every run its image is removed and the removal synced, so each
# run writes a fresh path, as a kernel update does (overwriting the previous image
# would hide the cost of fsync on ext4). The commands:
#
#   composer                 composer build --kver V --kmoddir DIR -o OUT --no-sync
#                            (the generic profile: zstd level 1, early microcode)
#   composer, durable        the same without --no-sync (fsync, rename, fsync dir)
#   composer, uncompressed   the same with a manifest that includes "generic" and
#                            sets the main segment's compression to "none"
#   dracut                   dracut --no-hostonly --force --kver V --kmoddir DIR OUT
#                            (its default: gzip -9; dracut 059 syncs the image itself
#                            only on a machine booted with systemd)
#   dracut, durable          the same, then sync OUT
#   dracut, uncompressed     ... --no-compress
#   mkinitramfs              mkinitramfs -d CONF -o OUT V, MODULES=most, COMPRESS=zstd
#                            (Debian's default), then sync OUT
#   mkinitramfs, uncompressed  the same where `zstd` is `cat`: initramfs-tools 0.142 has
#                            no uncompressed mode (an unknown COMPRESS falls back to
#                            gzip), so in its namespace a script that drops zstd's
#                            options and cats its file is bind-mounted over zstd
#
# Output: hyperfine's tables and WORK/report.md (tables, sizes, commands, date, machine)
# for book/src/benchmarks.md.

set -euo pipefail

runs=10
peer_runs=2
work="${TMPDIR:-/tmp}/composer-generic-bench"
kernel_root=

while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs="$2"; shift 2 ;;
        --peer-runs) peer_runs="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"

[ "$(id -u)" = 0 ] || die "run as root (mkinitramfs and the mount namespace need it)"
need hyperfine
need unshare util-linux
peers=$((peer_runs > 0))
if [ "$peers" = 1 ]; then
    need dracut "Debian package dracut-core"
    need mkinitramfs "Debian package initramfs-tools"
fi
need zstd

mkdir -p "$work"
work="$(cd "$work" && pwd)"
build_composer
module_tree
[ -f "$kernel_root/boot/config-$kver" ] || die "no boot/config-$kver in $kernel_root"
depmod_copy
peer_namespace
trap peer_cleanup EXIT

# mkinitramfs's configuration: Debian's, with MODULES=most and the compressor given.
if [ "$peers" = 1 ]; then
    mkinitramfs_conf "$work/mkinitramfs" most zstd
fi

cat >"$work/uncompressed.toml" <<'EOF'
include = ["generic"]

[[segment]]
name = "main"
compression = "none"
EOF

c_build="$composer build --kver $kver --kmoddir $kdir"
declare -a names cmds images
# add NAME IMAGE COMMAND: COMMAND writes IMAGE.
add() {
    names+=("$1")
    images+=("$2")
    cmds+=("$3")
}
add "composer" "$work/composer.img" "$c_build -o $work/composer.img --no-sync"
add "composer, durable" "$work/composer-durable.img" "$c_build -o $work/composer-durable.img"
add "composer, uncompressed" "$work/composer-none.img" "$c_build $work/uncompressed.toml -o $work/composer-none.img --no-sync"
add "composer, uncompressed, durable" "$work/composer-none-durable.img" "$c_build $work/uncompressed.toml -o $work/composer-none-durable.img"
peers_from=${#names[@]}
if [ "$peers" = 1 ]; then
add "dracut" "$work/dracut.img" "$work/ns/run dracut -q --no-hostonly --force --kver $kver --kmoddir $kdir $work/dracut.img"
add "dracut, durable" "$work/dracut-durable.img" "$work/ns/run dracut -q --no-hostonly --force --kver $kver --kmoddir $kdir $work/dracut-durable.img && sync $work/dracut-durable.img"
add "dracut, uncompressed" "$work/dracut-none.img" "$work/ns/run dracut -q --no-hostonly --force --no-compress --kver $kver --kmoddir $kdir $work/dracut-none.img"
add "mkinitramfs" "$work/mkinitramfs.img" "$work/ns/run mkinitramfs -d $work/mkinitramfs -o $work/mkinitramfs.img $kver"
add "mkinitramfs, durable" "$work/mkinitramfs-durable.img" "$work/ns/run mkinitramfs -d $work/mkinitramfs -o $work/mkinitramfs-durable.img $kver && sync $work/mkinitramfs-durable.img"
add "mkinitramfs, uncompressed" "$work/mkinitramfs-none.img" "NO_COMPRESSOR=1 $work/ns/run mkinitramfs -d $work/mkinitramfs -o $work/mkinitramfs-none.img $kver"
fi

echo "== one build each, to check that every command works" >&2
for i in "${!names[@]}"; do
    echo "-- ${names[$i]}" >&2
    sh -c "${cmds[$i]}" >/dev/null 2>"$work/check.log" || { cat "$work/check.log" >&2; die "${names[$i]} failed"; }
done

# The check above warmed the page cache: the peers (tens of seconds a run) get no
# warmup run.
hf() {
    local out="$1" n="$2" warm="$3"; shift 3
    local args=()
    while [ $# -gt 0 ]; do
        args+=(--prepare "rm -f $2 && sync" -n "$1" "$3")
        shift 3
    done
    hyperfine --warmup "$warm" --runs "$n" --export-markdown "$work/$out.md" "${args[@]}"
}
composer_args=()
for ((i = 0; i < peers_from; i++)); do composer_args+=("${names[$i]}" "${images[$i]}" "${cmds[$i]}"); done
peer_args=()
for ((i = peers_from; i < ${#names[@]}; i++)); do peer_args+=("${names[$i]}" "${images[$i]}" "${cmds[$i]}"); done
hf composer "$runs" 1 "${composer_args[@]}"
[ "$peers" = 0 ] || hf peers "$peer_runs" 0 "${peer_args[@]}"

# Sizes and entries of each image.
sizes="$work/sizes.md"
{
    echo "| Image | Size [bytes] | Entries | Segments |"
    echo "|:---|---:|---:|---:|"
    imgs="composer composer-none"
    [ "$peers" = 0 ] || imgs="$imgs dracut dracut-none mkinitramfs mkinitramfs-none"
    for img in $imgs; do
        f="$work/$img.img"
        entries=$("$composer" inspect "$f" | wc -l)
        [ "$entries" -gt 100 ] || die "$f holds $entries entries: its command did not build an initrd"
        segs=$("$composer" inspect --segments "$f" | tail -n +2 | wc -l)
        echo "| $img.img | $(stat -c %s "$f") | $entries | $segs |"
    done
} >"$sizes"

{
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)), work directory on $(stat -f -c %T "$work"), Linux $(uname -r)."
    echo
    echo "Kernel tree: $tree of $(basename "$kernel_root"), after depmod ($(find "$kdir" -name '*.ko*' | wc -l) modules)."
    echo
    if [ "$peers" = 1 ]; then
        echo "Tools: $("$composer" --version), $(dracut --version 2>/dev/null | head -n 1), initramfs-tools $(dpkg-query -W -f '${Version}' initramfs-tools 2>/dev/null)."
    else
        echo "Tools: $("$composer" --version) (alone: --peer-runs 0)."
    fi
    echo
    echo "composer ($runs runs each):"
    echo
    cat "$work/composer.md"
    echo
    if [ "$peers" = 1 ]; then
        echo "dracut and mkinitramfs ($peer_runs runs each):"
        echo
        cat "$work/peers.md"
        echo
    fi
    cat "$sizes"
} >"$work/report.md"
cat "$work/report.md"
