//! How the planner scales: plans N entries built in memory and prints the
//! time and the process's peak memory. Run one size per process so the
//! peak is that size's own:
//!
//!     cargo bench --bench plan_scale -- dirs 1000000
//!     cargo bench --bench plan_scale -- files 200000 SIZES_FILE
//!
//! SIZES_FILE has one file size per line (e.g. the module tree's, from
//! `find lib/modules/VER -type f -printf '%s\n'`); sizes are drawn from it
//! with a fixed seed. benches/plan-scale.sh runs the whole table.

use std::path::PathBuf;
use std::time::Instant;

use composer::entry::{Entry, Kind, Origin, Source};
use composer::path::ImagePath;
use composer::plan;
use composer::policy::{AlignMode, MtimePolicy, Policy};

fn name(text: &str) -> ImagePath {
    ImagePath::normalise(text.as_bytes(), &Origin::default()).expect("a valid name")
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let kind = args.first().map(String::as_str).unwrap_or("dirs");
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let align: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let origin = Origin::default();
    let mut entries: Vec<Entry> = Vec::with_capacity(n + 1100);
    match kind {
        "dirs" => {
            // Two levels: d/<i / 1000>/<i % 1000>.
            entries.push(Entry::new(name("d"), Kind::Dir, 0o755, origin.clone()));
            for i in 0..n {
                if i % 1000 == 0 {
                    let dir = name(&format!("d/{:04}", i / 1000));
                    entries.push(Entry::new(dir, Kind::Dir, 0o755, origin.clone()));
                }
                let leaf = name(&format!("d/{:04}/{:03}", i / 1000, i % 1000));
                entries.push(Entry::new(leaf, Kind::Dir, 0o755, origin.clone()));
            }
        }
        "files" => {
            let sizes: Vec<u64> = args
                .get(2)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
                .filter(|v: &Vec<u64>| !v.is_empty())
                .expect("files needs a sizes file with one size per line");
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            entries.push(Entry::new(name("m"), Kind::Dir, 0o755, origin.clone()));
            for i in 0..n {
                if i % 200 == 0 {
                    let dir = name(&format!("m/{:05}", i / 200));
                    entries.push(Entry::new(dir, Kind::Dir, 0o755, origin.clone()));
                }
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let size = sizes[(x % sizes.len() as u64) as usize];
                let mut source = Source::unresolved(PathBuf::from("/nonexistent"));
                source.size = size;
                let file = name(&format!("m/{:05}/module-{i:07}.ko", i / 200));
                entries.push(Entry::new(
                    file,
                    Kind::File {
                        source: source.into(),
                        links: composer::entry::Links::default(),
                    },
                    0o644,
                    origin.clone(),
                ));
            }
        }
        other => panic!("unknown kind {other}: use dirs or files"),
    }
    let policy = Policy {
        crc: false,
        align,
        mtime: MtimePolicy {
            fixed: Some(0),
            now: 0,
        },
        mode: AlignMode::Readers,
        auto_align: false,
        reflink: true,
    };
    let start = Instant::now();
    let layout = plan::archive(&entries, &policy);
    let elapsed = start.elapsed();
    let summary = plan::report::summarize(&layout, &entries);
    println!(
        "{kind}\t{n}\t{:.3}\t{}\t{}\t{}\t{}",
        elapsed.as_secs_f64(),
        peak_rss_kib() / 1024,
        summary.records,
        summary.missed,
        layout.size
    );
}
