#!/usr/bin/env bash
# Plans Debian's module tree at 4, 16 and 64 KiB in each alignment mode and
# prints misses, padding and the lower bound (no archive is written).
#
#   benches/planner-modules.sh [MODULE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
mods=${1:-$(ls -d target/test-assets/debian-kernel-*/lib/modules/*/ 2>/dev/null | head -n 1)}
if [ -z "$mods" ] || [ ! -d "$mods" ]; then
    echo "no module tree: pass one, or run the test suite once to fetch Debian's kernel" >&2
    exit 1
fi
mods=$(cd "$mods" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/modules.toml" <<TOML
[image]
order = "sorted"

[[tree]]
src = "$mods"
dst = "/lib/modules/$(basename "$mods")"
TOML
cargo build --release >/dev/null 2>&1
echo "input: $(find "$mods" -type f | wc -l) files, $(find "$mods" -type d | wc -l) directories, $(du -sb "$mods" | cut -f1) bytes"
printf '| alignment | mode | eligible | misses | padding | %% of archive | lower bound | fillers |\n|---:|---|---:|---:|---:|---:|---:|---:|\n'
for a in 4096 16384 65536; do
    for mode in gen-init-cpio readers kernel-only; do
        target/release/composer plan "$work/modules.toml" -a "$a" --align-mode "$mode" -t 0 --json > "$work/plan.json"
        python3 - "$a" "$mode" "$work/plan.json" <<'PY'
import json, sys
a, mode, path = sys.argv[1:]
s = json.load(open(path))["summary"]
pct = 100 * s["padding_bytes"] / s["archive_bytes"]
print(f'| {int(a)//1024} KiB | {mode} | {s["eligible"]} | {s["missed"]} | {s["padding_bytes"]:,} | {pct:.3f} | {s["padding_lower_bound"]:,} | {s["fillers"]} |')
PY
    done
done
