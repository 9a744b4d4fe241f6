# Shared by the benchmark scripts (sourced, not run). Expects `repo` (the checkout),
# `work` (an existing work directory) and `kernel_root` (empty: find or download one).

die() { echo "$(basename "$0"): $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 not found${2:+ ($2)}"; }

# Builds composer in release mode; sets `target_dir` and `composer`.
build_composer() {
    echo "== cargo build --release" >&2
    (cd "$repo" && cargo build --release --quiet --bin composer)
    target_dir="${CARGO_TARGET_DIR:-$repo/target}"
    composer="$target_dir/release/composer"
    [ -x "$composer" ] || die "$composer was not built"
}

# Debian's module tree: `kernel_root` as given, else the test suite's cached package
# (target/test-assets), else the current Debian kernel downloaded into the work
# directory. Sets `kernel_root` (absolute), `kver` and `tree` (lib/modules/<kver>).
module_tree() {
    if [ -z "$kernel_root" ]; then
        for d in "$target_dir"/test-assets/debian-kernel-*/; do
            [ -d "${d}lib/modules" ] && kernel_root="${d%/}"
        done
    fi
    if [ -z "$kernel_root" ]; then
        kernel_root="$work/kernel"
        if [ ! -d "$kernel_root/lib/modules" ]; then
            need apt-get; need apt-cache; need dpkg
            local pkg
            pkg="$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: <\{0,1\}\(linux-image-[^>]*\)>\{0,1\}$/\1/p' | head -n 1)"
            [ -n "$pkg" ] || die "apt-cache depends linux-image-amd64 names no package (apt-get update?)"
            echo "== downloading $pkg" >&2
            rm -rf "$work/dl" "$kernel_root.tmp"
            mkdir -p "$work/dl"
            (cd "$work/dl" && apt-get download -q "$pkg")
            dpkg -x "$work"/dl/*.deb "$kernel_root.tmp"
            mv "$kernel_root.tmp" "$kernel_root"
            rm -rf "$work/dl"
        fi
    fi
    kernel_root="$(cd "$kernel_root" && pwd)"
    kver="$(ls "$kernel_root/lib/modules" | head -n 1)"
    [ -n "$kver" ] || die "no lib/modules/<version> in $kernel_root"
    tree="lib/modules/$kver"
}

# Lists `tree` under ROOT twice: as a gen_init_cpio list (what usr/gen_initramfs.sh makes
# of a directory: `find` output sorted in the C locale, parents before children) and as
# a 3cpio manifest with every field given (type, mode, owner, mtime 0, size), so that
# 3cpio need not stat for them either. Sources are named under ROOT.
# Usage: tree_lists ROOT LIST MANIFEST
tree_lists() {
    local root="$1" list="$2" manifest="$3"
    {
        echo "# $tree of $(basename "$root"), as usr/gen_initramfs.sh lists a directory"
        echo "dir /lib 755 0 0"
        echo "dir /lib/modules 755 0 0"
        # %y type, %m octal permissions, %s size, %l symlink target; sorted on the path.
        (cd "$root" && find "$tree" -printf '%p\t%y\t%m\t%s\t%l\n') | LC_ALL=C sort -t "$(printf '\t')" -k1,1
    } | awk -F '\t' -v root="$root" -v list="$list" -v manifest="$manifest" '
        /^#/ || /^dir / {
            print > list
            if (/^dir /) { split($0, w, " "); print "-\t" substr(w[2], 2) "\tdir\t" w[3] "\t0\t0\t0" > manifest }
            next
        }
        {
            p = $1; t = $2; m = $3; s = $4; l = $5
            if (t == "f") {
                print "file /" p " " root "/" p " " m " 0 0" > list
                print root "/" p "\t" p "\tfile\t" m "\t0\t0\t0\t" s > manifest
            } else if (t == "d") {
                print "dir /" p " " m " 0 0" > list
                print "-\t" p "\tdir\t" m "\t0\t0\t0" > manifest
            } else if (t == "l") {
                print "slink /" p " " l " " m " 0 0" > list
                print "-\t" p "\tlink\t" m "\t0\t0\t0\t" l > manifest
            } else {
                print "unexpected file type " t " of " p > "/dev/stderr"; exit 1
            }
        }'
}

# For --cold: sets `drop` to a command for hyperfine's --prepare that empties the page
# cache, so that every run reads its sources, manifests and programs from disk (root
# only), written to work with and without hyperfine's shell (-N); and `drop_tail`, the
# same to append to a shell --prepare after `sync`.
cold_cache() {
    [ -w /proc/sys/vm/drop_caches ] || die "--cold needs root (it writes /proc/sys/vm/drop_caches)"
    drop_tail=" && echo 3 > /proc/sys/vm/drop_caches"
    drop="sh -c 'sync$drop_tail'"
}

# A package's tree has no modules.dep (its postinst runs depmod); dracut and
# mkinitramfs need one: a copy of `tree` with depmod's files under WORK/tree, which
# every tool then reads. Sets `kdir` (the copy's lib/modules/<kver>).
depmod_copy() {
    need depmod kmod
    kdir="$work/tree/lib/modules/$kver"
    if [ ! -f "$kdir/modules.dep" ]; then
        echo "== depmod of a copy of $tree" >&2
        rm -rf "$work/tree"
        mkdir -p "$work/tree/lib/modules"
        cp -a "$kernel_root/$tree" "$kdir"
        depmod -b "$work/tree" "$kver"
    fi
}

# The peers' view of the kernel: WORK/ns/run runs "$@" in a private mount namespace
# where `kdir` is /lib/modules/<kver> and the package's config is /boot/config-<kver>
# (mkinitramfs knows only those paths; nothing on the machine changes). With
# NO_COMPRESSOR=1 in its environment, zstd is cat there (initramfs-tools 0.142 has no
# uncompressed mode). Call peer_cleanup on exit.
peer_namespace() {
    need unshare util-linux
    [ -f "$kernel_root/boot/config-$kver" ] || die "no boot/config-$kver in $kernel_root"
    mkdir -p "$work/ns"
    # mkinitramfs runs `zstd -q -9 -T0 -c FILE`: drop the options, cat the file.
    cat >"$work/ns/zstd-is-cat" <<'EOF2'
#!/bin/sh
for a; do
    shift
    case "$a" in -*) ;; *) set -- "$@" "$a" ;; esac
done
exec cat "$@"
EOF2
    chmod +x "$work/ns/zstd-is-cat"
    local zstd_path
    zstd_path="$(command -v zstd)" || die "zstd not found"
    cat >"$work/ns/run" <<EOF2
#!/bin/sh
# Runs "\$@" with $kernel_root's lib/modules and boot/config-$kver in place.
set -e
mkdir -p /lib/modules /boot
exec unshare --mount --propagation private sh -c '
    mount -t tmpfs tmpfs /lib/modules
    mkdir /lib/modules/$kver
    mount --bind "$kdir" /lib/modules/$kver
    mount -t tmpfs tmpfs /boot
    cp "$kernel_root/boot/config-$kver" /boot/
    [ -z "\${NO_COMPRESSOR:-}" ] || mount --bind "$work/ns/zstd-is-cat" "$zstd_path"
    exec "\$@"' sh "\$@"
EOF2
    chmod +x "$work/ns/run"
    created_lib_modules=
    [ -e /lib/modules ] || created_lib_modules=1
}
peer_cleanup() { [ -z "${created_lib_modules:-}" ] || rmdir /lib/modules 2>/dev/null || true; }

# mkinitramfs's configuration in DIR: Debian's, with MODULES= and COMPRESS= given.
# Usage: mkinitramfs_conf DIR MODULES COMPRESS
mkinitramfs_conf() {
    mkdir -p "$1"
    cp -a /etc/initramfs-tools/. "$1/"
    sed -i "s/^MODULES=.*/MODULES=$2/; s/^COMPRESS=.*/COMPRESS=$3/" "$1/initramfs.conf"
}
