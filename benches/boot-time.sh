#!/usr/bin/env bash
# Boot time: how long each initrd takes to reach the root, booted in QEMU with Debian's
# kernel, against dracut's and initramfs-tools' images for the same kernel and root, in
# one run. The root is one ext4 filesystem on virtio-blk, named by root=UUID=; its
# /sbin/init (a static busybox script) prints /proc/uptime first thing, then the
# kernel's timestamps from dmesg, and powers off.
#
# Usage: benches/boot-time.sh [--boots N] [--images LIST] [--work DIR] [--kernel-root DIR]
#                             [--smp N] [--icount] [--compressions] [--no-layered]
#
#   --boots N          boots of each image (default 5); the boots of the images take
#                      turns, so that a slow spell of the machine hits all of them
#   --images LIST      comma-separated subset of: composer-shell, composer-systemd,
#                      dracut, mkinitramfs-most, composer-shell-hostonly,
#                      composer-systemd-hostonly, dracut-hostonly, mkinitramfs-dep
#                      (default: all)
#   --no-layered       leave out the layered root: by default each generic image also
#                      boots a root on LVM (a logical volume of a volume group on
#                      virtio-blk, root=/dev/mapper/benchvg-root), which the initrd has
#                      to find and activate; its rows are NAME@lvm. The volume group is
#                      written on this machine without device-mapper (lvm2's tools with
#                      activation off), the filesystem copied into the volume's extents
#   --compressions     also the generic shell image with each compression (none, lz4,
#                      zstd 1, zstd 3, zstd 19, gzip, xz): what the kernel pays to unpack it
#   --work DIR         where images, root and logs go
#                      (default: ${TMPDIR:-/tmp}/composer-boot-bench)
#   --kernel-root DIR  a `dpkg -x` of a linux-image package (see benches/generic-image.sh)
#   --smp N            guest CPUs (default 2)
#   --icount           TCG with QEMU's instruction counting (-icount shift=0,sleep=off):
#                      the guest's clock runs at a billion instructions a second of its
#                      own and skips its idle time, so a boot's times are its CPU work:
#                      on an otherwise idle host the same from one boot to the next
#                      within 20-40 ms, where TCG's wall times differ by seconds (a
#                      busy host still shows in the guest's waits for its disk: take
#                      the least of a few boots). Not wall time: for comparing images,
#                      one CPU (--smp 1)
#   --release SUITE    boot a Debian release's kernel with images built from that
#                      release's root: a root made once by mmdebstrap --variant=apt from
#                      this machine's apt sources with the suite renamed (trixie,
#                      unstable, ...), holding the release's kernel, systemd, udev, lvm2,
#                      cryptsetup, busybox, dracut-core and initramfs-tools, in
#                      WORK/release-SUITE. composer builds from it (--root), and dracut
#                      and mkinitramfs run inside it (chroot): each tool as that release
#                      ships it. The hostonly images are left out (they are this
#                      machine's, not the release's). A root already in
#                      WORK/release-SUITE is used as it is; for composer's images alone
#                      (--images without dracut and mkinitramfs-most) it needs no peers,
#                      so a link to the boot tests' root (target/test-assets) does
#   --extra NAME=IMG   also boot the image IMG, as NAME (repeatable): a build of
#                      another commit, say, to compare a change in the same run; a
#                      NAME ending in "hostonly" is compared with the hostonly peers
#
# Needs: root (the peers' mount namespace), cargo, qemu-system-x86_64, busybox-static,
# mkfs.ext4 (e2fsprogs), zstd, and for the peers dracut (dracut-core) and mkinitramfs
# (initramfs-tools). KVM when a guest boots with it, else TCG.
#
# The images (each tool's own default compression):
#   composer-shell     composer build: include = ["generic"], init = "shell"
#   composer-systemd   the same with init = "systemd" (this machine's systemd)
#   dracut             dracut --no-hostonly --kver V --kmoddir DIR (with this machine's
#                      systemd and udev, as Debian's dracut builds it)
#   mkinitramfs-most   mkinitramfs with MODULES=most (Debian's default configuration)
#   composer-shell-hostonly, composer-systemd-hostonly
#                      the same with include = ["hostonly"]: this machine's root stack
#   dracut-hostonly    dracut --hostonly, plus --add-drivers "virtio_pci virtio_blk":
#                      a machine whose kernel has those built in gives dracut no
#                      module for them, and the guest's root is on virtio-blk
#   mkinitramfs-dep    mkinitramfs with MODULES=dep
# The hostonly images are made for this machine, so they are built only when its
# root is an ext4 filesystem on a virtio disk, as the guest's is (a virtual
# machine's); elsewhere the script says so and leaves them out.
#
# Every boot: -accel kvm|tcg -cpu host|max -smp N -m 2048, the kernel command line
# "console=ttyS0 root=UUID=... ro quiet printk.time=1 panic=-1". From each boot:
#   unpack     the kernel's "Trying to unpack rootfs image" to "Freeing initrd memory"
#   /init      the kernel's "Run /init as init process" (after the unpack, the kernel's
#              own initcalls)
#   root       the root's init's /proc/uptime
#   initrd     root - /init: the initrd's userspace, what the generator controls
#
# Output: WORK/boots.tsv (every boot) and WORK/report.md (medians, sizes, date,
# machine) for book/src/benchmarks.md.

set -euo pipefail

boots=5
images_wanted=composer-shell,composer-systemd,dracut,mkinitramfs-most,composer-shell-hostonly,composer-systemd-hostonly,dracut-hostonly,mkinitramfs-dep
work="${TMPDIR:-/tmp}/composer-boot-bench"
kernel_root=
smp=2
icount=
compressions=
layered=1
extras=()
release=

while [ $# -gt 0 ]; do
    case "$1" in
        --boots) boots="$2"; shift 2 ;;
        --images) images_wanted="$2"; shift 2 ;;
        --work) work="$2"; shift 2 ;;
        --kernel-root) kernel_root="$2"; shift 2 ;;
        --smp) smp="$2"; shift 2 ;;
        --icount) icount=1; shift ;;
        --compressions) compressions=1; shift ;;
        --no-layered) layered=; shift ;;
        --extra) extras+=("$2"); shift 2 ;;
        --release) release="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=benches/lib.sh
. "$repo/benches/lib.sh"

wanted() { case ",$images_wanted," in *",$1,"*) return 0 ;; esac; return 1; }
[ "$(id -u)" = 0 ] || die "run as root (the peers' mount namespace needs it)"
need qemu-system-x86_64 "Debian package qemu-system-x86"
need mkfs.ext4 e2fsprogs
need zstd
busybox=
for b in /bin/busybox /usr/bin/busybox; do
    [ -x "$b" ] && file -L "$b" 2>/dev/null | grep -q 'statically linked' && busybox=$b
done
[ -n "$busybox" ] || die "no static busybox (Debian package busybox-static)"
# images_wanted without the hostonly images (and initramfs-tools' MODULES=dep).
drop_hostonly_images() {
    local kept='' i
    for i in ${images_wanted//,/ }; do
        case "$i" in *hostonly | mkinitramfs-dep) ;; *) kept="$kept,$i" ;; esac
    done
    images_wanted=${kept#,}
}
if [ -n "$release" ]; then
    need mmdebstrap "Debian package mmdebstrap"
    drop_hostonly_images
fi
# Hostonly images only where this machine's root is like the guest's.
root_source=$(findmnt -n -o SOURCE / 2>/dev/null || true)
root_fstype=$(findmnt -n -o FSTYPE / 2>/dev/null || true)
root_disk=$(lsblk -n -d -o PKNAME "$root_source" 2>/dev/null | head -n 1 || true)
[ -n "$root_disk" ] || root_disk=${root_source#/dev/}
root_driver=$(basename "$(readlink -f "/sys/class/block/$root_disk/device/driver" 2>/dev/null)" 2>/dev/null || true)
if [ "$root_fstype" != ext4 ] || [ "$root_driver" != virtio_blk ]; then
    hostonly_wanted=
    for i in ${images_wanted//,/ }; do
        case "$i" in *hostonly | mkinitramfs-dep) hostonly_wanted=1 ;; esac
    done
    if [ -n "$hostonly_wanted" ]; then
        echo "== leaving out the hostonly images: this machine's root ($root_source, ${root_fstype:-?} on ${root_driver:-?}) is not ext4 on virtio-blk like the guest's" >&2
        drop_hostonly_images
    fi
fi
if [ -n "$layered" ] && ! command -v pvcreate >/dev/null; then
    echo "== leaving out the layered (LVM) root: no pvcreate (Debian package lvm2)" >&2
    layered=
fi
if [ -z "$release" ]; then
    if wanted dracut || wanted dracut-hostonly; then need dracut "Debian package dracut-core"; fi
    if wanted mkinitramfs-most || wanted mkinitramfs-dep; then need mkinitramfs "Debian package initramfs-tools"; fi
fi

mkdir -p "$work"
work="$(cd "$work" && pwd)"
build_composer
if [ -n "$release" ]; then
    # The release's root, made once: this machine's apt sources, the suite renamed
    # (unstable has no -updates suite; its Release file may be past its Valid-Until
    # on a mirror's snapshot).
    rroot="$work/release-$release"
    # (A root made before is kept; one without the peers' tools does for
    # composer's images alone: the boot tests' root, linked there.)
    peers_wanted=
    if wanted dracut || wanted mkinitramfs-most; then peers_wanted=1; fi
    if [ ! -d "$rroot/usr/lib/modules" ] || { [ -n "$peers_wanted" ] && [ ! -x "$rroot/usr/bin/dracut" ]; }; then
        echo "== the $release root (mmdebstrap)" >&2
        suites="$release $release-updates"
        case "$release" in unstable | sid) suites=$release ;; esac
        awk -v suites="$suites" 'BEGIN { RS = ""; ORS = "\n\n" } /URIs:/ && !done {
                n = split($0, l, "\n"); out = ""
                for (i = 1; i <= n; i++) out = out (l[i] ~ /^Suites:/ ? "Suites: " suites : l[i]) "\n"
                printf "%s", out; done = 1 }' /etc/apt/sources.list.d/debian.sources >"$work/release.sources"
        pkgs=linux-image-amd64,systemd,udev,kmod,cryptsetup,lvm2,busybox,e2fsprogs,util-linux,dracut-core,initramfs-tools,zstd
        # Debian 13 and later: systemd-cryptsetup is a package of its own.
        [ "$release" = bookworm ] || pkgs=$pkgs,systemd-cryptsetup
        rm -rf "$rroot"
        INITRD=No mmdebstrap --variant=apt -q --include="$pkgs" \
            --aptopt='Acquire::Check-Valid-Until "false"' "$release" "$rroot" "$work/release.sources" ||
            die "mmdebstrap of $release failed"
    fi
    kver=$(ls "$rroot/usr/lib/modules" | head -n 1)
    [ -n "$kver" ] || die "no kernel in the $release root"
    vmlinuz="$rroot/boot/vmlinuz-$kver"
    kernel_root=$rroot
    # Each peer runs inside the root, with the kernel's file systems it reads.
    in_root() { # COMMAND...
        unshare --mount --propagation private sh -c '
            r=$1; shift
            mount -t proc proc "$r/proc"
            mount -t sysfs sys "$r/sys"
            mount --rbind /dev "$r/dev"
            mount -t tmpfs tmpfs "$r/tmp"
            exec chroot "$r" "$@"' sh "$rroot" "$@"
    }
else
    module_tree
    depmod_copy
    peer_namespace
    trap peer_cleanup EXIT
    vmlinuz="$kernel_root/boot/vmlinuz-$kver"
fi
[ -f "$vmlinuz" ] || die "no boot/vmlinuz-$kver in $kernel_root"

# The root: busybox and an init that reports and powers off.
uuid=6c0f9d1e-5b7a-4c1f-9e0a-b00750000001
echo "== the root filesystem" >&2
rm -rf "$work/rootfs"
mkdir -p "$work/rootfs"/{bin,sbin,etc,proc,sys,dev,run,tmp}
cp "$busybox" "$work/rootfs/bin/busybox"
cat >"$work/rootfs/sbin/init" <<'EOF'
#!/bin/busybox sh
# The time first: nothing of the root's own runs before it.
read -r up _ </proc/uptime 2>/dev/null || {
    /bin/busybox mount -t proc proc /proc
    read -r up _ </proc/uptime
}
[ -e /dev/console ] || /bin/busybox mount -t devtmpfs devtmpfs /dev
exec >/dev/console 2>&1
echo "BOOTBENCH root $up"
/bin/busybox dmesg | while read -r line; do
    case "$line" in
    *"Trying to unpack rootfs"* | *"Freeing initrd memory"* | *"Run /init as init process"*)
        echo "BOOTBENCH dmesg $line" ;;
    esac
done
echo "BOOTBENCH end"
/bin/busybox sync
/bin/busybox poweroff -f
EOF
chmod 755 "$work/rootfs/sbin/init"
printf 'ID=bootbench\nNAME="boot benchmark root"\n' >"$work/rootfs/etc/os-release"
rm -f "$work/root.img"
mkfs.ext4 -q -F -U "$uuid" -L bootbench -d "$work/rootfs" "$work/root.img" 64M

# The layered root: the same filesystem in the logical volume benchvg/root, the only
# one of a volume group on one disk. This machine may have no device-mapper: the
# volume is created with activation off (lvm2 then writes only its metadata), and the
# filesystem copied into its extents, which are contiguous on the one disk.
lvm_cfg='global { activation = 0 } devices { use_devicesfile = 0 }'
lvm_loop=
lvm_cleanup() {
    if [ -n "$lvm_loop" ]; then
        vgchange --config "$lvm_cfg" -q -an benchvg >/dev/null 2>&1 || true
        losetup -d "$lvm_loop" 2>/dev/null || true
        lvm_loop=
    fi
}
if [ -n "$layered" ]; then
    echo "== the layered root (LVM)" >&2
    trap 'lvm_cleanup; peer_cleanup' EXIT
    rm -f "$work/lvm.img"
    truncate -s 96M "$work/lvm.img"
    lvm_loop=$(losetup -f --show "$work/lvm.img") || die "losetup failed (root, loop devices)"
    export LVM_SUPPRESS_FD_WARNINGS=1
    pvcreate --config "$lvm_cfg" -q -f "$lvm_loop" >/dev/null 2>&1 &&
        vgcreate --config "$lvm_cfg" -q benchvg "$lvm_loop" >/dev/null 2>&1 &&
        lvcreate --config "$lvm_cfg" -q -an -Zn -y -L 64M -n root benchvg >/dev/null 2>&1 ||
        die "could not write the volume group benchvg on $lvm_loop"
    # One segment: the volume's extents START-END on the disk, after the first extent's
    # offset.
    range=$(lvs --config "$lvm_cfg" --noheadings -o seg_pe_ranges benchvg/root 2>/dev/null | tr -d ' ')
    pe_start=$(pvs --config "$lvm_cfg" --noheadings --units b --nosuffix -o pe_start "$lvm_loop" 2>/dev/null | tr -d ' ')
    extent=$(vgs --config "$lvm_cfg" --noheadings --units b --nosuffix -o vg_extent_size benchvg 2>/dev/null | tr -d ' ')
    first=${range##*:}
    first=${first%-*}
    [ "${range%%:*}" = "$lvm_loop" ] && [ -n "$pe_start" ] && [ -n "$extent" ] && [ -n "$first" ] ||
        die "unexpected layout of benchvg/root: '$range' (pe_start $pe_start, extent $extent)"
    lvm_cleanup
    dd if="$work/root.img" of="$work/lvm.img" bs=1M seek=$(((pe_start + first * extent) / 1048576)) \
        conv=notrunc status=none
    trap peer_cleanup EXIT
fi

# The images.
declare -a names
echo "== the images" >&2
composer_image() { # NAME INIT [COMPRESSION [LEVEL]]
    local m="$work/$1.toml" profile=generic
    case "$1" in *-hostonly) profile=hostonly ;; esac
    {
        echo "include = [\"$profile\"]"
        echo "init = \"$2\""
        if [ -n "${3:-}" ]; then
            printf '\n[[segment]]\nname = "main"\ncompression = "%s"\n' "$3"
            [ -z "${4:-}" ] || echo "level = $4"
        fi
    } >"$m"
    if [ -n "$release" ]; then
        "$composer" build --root "$rroot" --kver "$kver" --no-sync "$m" -o "$work/$1.img" >/dev/null
    else
        "$composer" build --kver "$kver" --kmoddir "$kdir" --no-sync "$m" -o "$work/$1.img" >/dev/null
    fi
    names+=("$1")
}
if wanted composer-shell; then composer_image composer-shell shell; fi
if wanted composer-systemd; then composer_image composer-systemd systemd; fi
dracut_image() { # NAME DRACUT-OPTIONS...
    local n=$1
    shift
    echo "-- $n" >&2
    if [ -n "$release" ]; then
        in_root dracut -q "$@" --force --kver "$kver" "/var/tmp/$n.img" 2>"$work/$n.log" &&
            mv "$rroot/var/tmp/$n.img" "$work/$n.img" ||
            { cat "$work/$n.log" >&2; die "dracut failed"; }
    else
        "$work/ns/run" dracut -q "$@" --force --kver "$kver" --kmoddir "$kdir" "$work/$n.img" 2>"$work/$n.log" ||
            { cat "$work/$n.log" >&2; die "dracut failed"; }
    fi
    names+=("$n")
}
mkinitramfs_image() { # NAME MODULES
    echo "-- $1" >&2
    if [ -n "$release" ]; then
        # The release's own configuration (MODULES=most, its default compression).
        in_root mkinitramfs -o "/var/tmp/$1.img" "$kver" 2>"$work/$1.log" &&
            mv "$rroot/var/tmp/$1.img" "$work/$1.img" ||
            { cat "$work/$1.log" >&2; die "mkinitramfs failed"; }
    else
        mkinitramfs_conf "$work/$1" "$2" zstd
        "$work/ns/run" mkinitramfs -d "$work/$1" -o "$work/$1.img" "$kver" 2>"$work/$1.log" ||
            { cat "$work/$1.log" >&2; die "mkinitramfs failed"; }
    fi
    names+=("$1")
}
if wanted dracut; then dracut_image dracut --no-hostonly; fi
if wanted mkinitramfs-most; then mkinitramfs_image mkinitramfs-most most; fi
if wanted composer-shell-hostonly; then composer_image composer-shell-hostonly shell; fi
if wanted composer-systemd-hostonly; then composer_image composer-systemd-hostonly systemd; fi
if wanted dracut-hostonly; then dracut_image dracut-hostonly --hostonly --add-drivers "virtio_pci virtio_blk"; fi
if wanted mkinitramfs-dep; then mkinitramfs_image mkinitramfs-dep dep; fi
if [ -n "$compressions" ]; then
    composer_image shell-none shell none
    composer_image shell-lz4 shell lz4
    composer_image shell-zstd1 shell zstd 1
    composer_image shell-zstd3 shell zstd 3
    composer_image shell-zstd19 shell zstd 19
    composer_image shell-gzip shell gzip
    composer_image shell-xz shell xz
fi
for e in "${extras[@]}"; do
    n=${e%%=*}
    [ "$n" != "$e" ] && [ -n "$n" ] || die "--extra takes NAME=IMAGE, not $e"
    [ -f "${e#*=}" ] || die "--extra $e: no such image"
    cp "${e#*=}" "$work/$n.img"
    names+=("$n")
done
[ "${#names[@]}" -gt 0 ] || die "no image chosen (--images, --extra)"

# KVM when the kernel, started with it and no root, reaches its panic within 30 s (a
# guest that boots in a second or two with KVM); else TCG. A /dev/kvm can open, and
# even start a paused guest, and still not run one at any speed (on one machine this
# ran on, every boot with it stopped in the firmware until its timeout).
mkdir -p "$work/logs"
accel=(-accel tcg -cpu max)
if [ -n "$icount" ]; then
    accel=(-accel tcg -cpu max -icount "shift=0,sleep=off")
elif [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    probe_log="$work/logs/kvm-probe.log"
    if timeout 30 qemu-system-x86_64 -accel kvm -cpu host -smp 1 -m 256 \
        -nographic -no-reboot -nodefaults -serial stdio -monitor none \
        -kernel "$vmlinuz" -append "console=ttyS0 panic=-1 printk.time=1" \
        </dev/null >"$probe_log" 2>&1 && grep -q "Kernel panic" "$probe_log"; then
        accel=(-accel kvm -cpu host)
    else
        echo "== /dev/kvm does not run a guest here: TCG" >&2
    fi
fi
append="ro quiet printk.time=1 panic=-1"
# Each run: an image on a root. The generic images also on the layered root.
runs=("${names[@]}")
if [ -n "$layered" ]; then
    for n in composer-shell composer-systemd dracut mkinitramfs-most; do
        case " ${names[*]} " in *" $n "*) runs+=("$n@lvm") ;; esac
    done
fi

# One boot: prints "unpack_start unpack_end run_init root" (seconds after boot).
boot() { # IMAGE LOG DISK ROOT
    timeout 300 qemu-system-x86_64 "${accel[@]}" -smp "$smp" -m 2048 \
        -nographic -no-reboot -nodefaults -serial stdio -monitor none \
        -kernel "$vmlinuz" -initrd "$1" -append "console=ttyS0 root=$4 $append" \
        -drive "file=$3,format=raw,if=virtio,snapshot=on" </dev/null >"$2" 2>&1 || true
    tr -d '\r' <"$2" | awk '
        function ts(line) { sub(/^[^[]*\[ */, "", line); sub(/\].*/, "", line); return line }
        /BOOTBENCH dmesg .*Trying to unpack rootfs/ { us = ts($0) }
        /BOOTBENCH dmesg .*Freeing initrd memory/ { ue = ts($0) }
        /BOOTBENCH dmesg .*Run \/init as init process/ { ri = ts($0) }
        /BOOTBENCH root / { root = $0; sub(/.*BOOTBENCH root /, "", root); sub(/ .*/, "", root) }
        /BOOTBENCH end/ { end = 1 }
        END {
            if (!end || root == "" || ri == "") exit 1
            print (us == "" ? "-" : us), (ue == "" ? "-" : ue), ri, root
        }'
}

echo "== $boots boots of ${#runs[@]} images and roots (${accel[*]}, -smp $smp)" >&2
printf 'image\tboot\tunpack_start\tunpack_end\trun_init\troot\n' >"$work/boots.tsv"
for ((i = 1; i <= boots; i++)); do
    for n in "${runs[@]}"; do
        log="$work/logs/$n-$i.log"
        case "$n" in
        *@lvm) disk=$work/lvm.img root=/dev/mapper/benchvg-root ;;
        *) disk=$work/root.img root=UUID=$uuid ;;
        esac
        if ! r=$(boot "$work/${n%@lvm}.img" "$log" "$disk" "$root"); then
            tail -n 30 "$log" >&2
            die "$n did not reach the root (boot $i; console in $log)"
        fi
        read -r us ue ri root <<<"$r"
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$i" "$us" "$ue" "$ri" "$root" >>"$work/boots.tsv"
        echo "-- $n boot $i: /init at $ri s, root at $root s" >&2
    done
done

# Medians per image.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }
# The median over the rounds of IMAGE's initrd time over PEER's in the same round: the
# boots of one round run one after the other, so a slow spell of the machine weighs on
# both sides of each ratio.
paired() { # IMAGE PEER
    awk -F '\t' -v img="$1" -v peer="$2" '
        NR > 1 && $1 == img { a[$2] = $6 - $5 }
        NR > 1 && $1 == peer { b[$2] = $6 - $5 }
        END { for (i in a) if ((i in b) && b[i] > 0) printf "%.4f\n", a[i] / b[i] }' "$work/boots.tsv" | median
}
# The median over the rounds of IMAGE's time to the root's init minus the fastest of the
# PEERS' (comma-separated) in the same round: below 0, IMAGE reached the root first.
ahead() { # IMAGE PEERS
    awk -F '\t' -v img="$1" -v peers=",$2," '
        NR > 1 && $1 == img { a[$2] = $6 }
        NR > 1 && index(peers, "," $1 ",") { if (!($2 in b) || $6 < b[$2]) b[$2] = $6 }
        END { for (i in a) if (i in b) printf "%.4f\n", a[i] - b[i] }' "$work/boots.tsv" | median
}
col() { # IMAGE AWK-EXPRESSION
    awk -F '\t' -v img="$1" "NR > 1 && \$1 == img && \$3 != \"-\" && \$4 != \"-\" { print $2 }" "$work/boots.tsv" | median
}
{
    echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) CPUs ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)), Linux $(uname -r); guests: qemu ${accel[*]} -smp $smp -m 2048, $(qemu-system-x86_64 --version | head -n 1)."
    echo
    if [ -n "$release" ]; then
        echo "Release: $release ($(sed -n 's/^PRETTY_NAME=//p' "$rroot/etc/os-release" | tr -d '"')); kernel $kver; systemd $(chroot "$rroot" dpkg-query -W -f '${Version}' systemd); dracut $(chroot "$rroot" dpkg-query -W -f '${Version}' dracut-core); initramfs-tools $(chroot "$rroot" dpkg-query -W -f '${Version}' initramfs-tools). Images built from that root, peers run inside it. Medians of $boots boots each, seconds after boot."
    else
        echo "Kernel: $kver (Debian's package). Medians of $boots boots each, seconds after boot."
    fi
    echo
    echo "vs dracut: the initrd userspace against dracut's image of the same profile (--hostonly for the hostonly images and MODULES=dep, else --no-hostonly) and root (NAME@lvm: the root on LVM); the median of the images' medians, and the median of the rounds' ratios (each round boots every image once, one after the other, so that a slow spell weighs on both sides of a ratio). vs best peer: composer's time to the root's init minus the fastest peer image's (dracut's or initramfs-tools' of the same profile and root) in the same round, the median of the rounds; below 0 composer reached the root first."
    echo
    echo "| Image | Size [MB] | Unpack [s] | /init [s] | Root's init [s] | Initrd userspace [s] | vs dracut | vs dracut, by round | vs best peer, by round [s] |"
    echo "|:---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for n in "${runs[@]}"; do
        size=$(awk -v s="$(stat -c %s "$work/${n%@lvm}.img")" 'BEGIN { printf "%.1f", s / 1e6 }')
        initrd=$(col "$n" '$6 - $5')
        # dracut's image of the same profile and root, and every peer's.
        case "$n" in
        *@lvm) peers=dracut@lvm,mkinitramfs-most@lvm ;;
        *hostonly | mkinitramfs-dep) peers=dracut-hostonly,mkinitramfs-dep ;;
        *) peers=dracut,mkinitramfs-most ;;
        esac
        peer=${peers%%,*}
        ratio=$(awk -v a="$initrd" -v b="$(col "$peer" '$6 - $5')" 'BEGIN { if (b + 0 > 0 && a != "-") printf "%.2fx", a / b; else print "-" }')
        by_round=$(paired "$n" "$peer")
        [ "$by_round" = - ] || by_round="${by_round}x"
        case "$n" in
        dracut* | mkinitramfs*) lead=- ;;
        *) lead=$(ahead "$n" "$peers") ;;
        esac
        echo "| $n | $size | $(col "$n" '$4 - $3') | $(col "$n" '$5') | $(col "$n" '$6') | $initrd | $ratio | $by_round | $lead |"
    done
} >"$work/report.md"
cat "$work/report.md"
