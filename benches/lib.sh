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
