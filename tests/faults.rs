//! Faults injected into builds: too little room for every codec, a filesystem filled
//! during the write, `max_size`, a read-only
//! target, SIGKILL and SIGTERM at random points of a large build, and two builds to
//! one output at once. In each case the existing image stays byte for byte what it
//! was (or becomes one complete new image), and no temporary file outlives the next
//! build.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{self, Scratch};

const CODECS: [&str; 7] = ["none", "gzip", "zstd", "xz", "lzma", "bzip2", "lz4"];

/// Pseudo-random, incompressible bytes.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A sysroot of `files` files of `size` bytes and a manifest over it per codec.
fn manifests(dir: &Path, files: usize, size: usize) -> Vec<(&'static str, PathBuf)> {
    let data = dir.join("root/data");
    fs::create_dir_all(&data).unwrap();
    for i in 0..files {
        fs::write(data.join(format!("f{i}")), noise(i as u64 + 1, size)).unwrap();
    }
    CODECS
        .iter()
        .map(|c| {
            let m = dir.join(format!("{c}.toml"));
            fs::write(
                &m,
                format!(
                    "root = \"root\"\n\n[[tree]]\nsrc = \"/data\"\n\n[[segment]]\nname = \"main\"\ncompression = \"{c}\"\nlevel = {}\n",
                    match *c {
                        "gzip" | "bzip2" | "xz" | "lzma" | "zstd" => "1",
                        _ => "",
                    }
                )
                .replace("level = \n", ""),
            )
            .unwrap();
            (*c, m)
        })
        .collect()
}

fn temporaries(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".composer-"))
        .collect()
}

/// A tmpfs of `size` at `at`, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(at: &Path, options: &str) -> Option<Tmpfs> {
        fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "composer-test"])
            .arg(at)
            .status()
            .ok()?
            .success();
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn build(m: &Path, out: &Path) -> Command {
    let mut cmd = support::composer();
    cmd.arg("build").arg(m).arg("-o").arg(out);
    cmd
}

/// An image larger than the output's free space is refused before anything is
/// written, for every codec: the message names both sizes, the old image stays, no
/// temporary is left. With room, the same build writes (and an image whose bound does
/// not fit but whose compressed size does is measured, then written).
#[test]
fn a_filesystem_without_room_refuses_before_writing_for_every_codec() {
    if !support::require_root() {
        return;
    }
    let dir = Scratch::new("faults-room");
    let ms = manifests(&dir, 4, 300_000);
    let Some(fs_) = Tmpfs::new(&dir.join("small"), "size=512k") else {
        support::skip("cannot mount a tmpfs");
        return;
    };
    let out = fs_.0.join("initrd.img");
    fs::write(&out, b"the previous image").unwrap();
    for (codec, m) in &ms {
        let o = support::run(&mut build(m, &out));
        assert!(
            !o.status.success(),
            "{codec}: a 1.2 MB image fit in 512 KiB"
        );
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("the image needs") && e.contains(" free; nothing was written"),
            "{codec}: {e}"
        );
        assert_eq!(fs::read(&out).unwrap(), b"the previous image", "{codec}");
        assert!(
            temporaries(&fs_.0).is_empty(),
            "{codec}: {:?}",
            temporaries(&fs_.0)
        );
    }
    // 1.2 MB of zeros: more than the room before compression, a few KiB after.
    let zeros = dir.join("zeros");
    fs::create_dir_all(zeros.join("root/data")).unwrap();
    fs::write(zeros.join("root/data/z"), vec![0u8; 1_200_000]).unwrap();
    let m = zeros.join("zstd.toml");
    fs::write(
        &m,
        "root = \"root\"\n\n[[tree]]\nsrc = \"/data\"\n\n[[segment]]\nname = \"main\"\ncompression = \"zstd\"\n",
    )
    .unwrap();
    let o = support::run(&mut build(&m, &out));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let image = fs::read(&out).unwrap();
    assert!(image.len() < 64 << 10 && image.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]));
    assert!(temporaries(&fs_.0).is_empty());

    let Some(big) = Tmpfs::new(&dir.join("big"), "size=4m") else {
        return;
    };
    let out = big.0.join("initrd.img");
    for (codec, m) in &ms {
        let o = support::run(&mut build(m, &out));
        assert!(
            o.status.success(),
            "{codec} with room: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// The room the build saw goes while it writes (another writer fills the filesystem):
/// the write fails with ENOSPC, the old image stays byte for byte, no temporary is left.
#[test]
fn a_filesystem_filled_during_the_write_keeps_the_old_image() {
    if !support::require_root() {
        return;
    }
    let dir = Scratch::new("faults-enospc");
    let data = dir.join("root/data");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("noise"), noise(7, 12 << 20)).unwrap();
    let m = dir.join("gzip.toml");
    fs::write(
        &m,
        "root = \"root\"\n\n[[tree]]\nsrc = \"/data\"\n\n[[segment]]\nname = \"main\"\ncompression = \"gzip\"\nlevel = 9\n",
    )
    .unwrap();
    let Some(fs_) = Tmpfs::new(&dir.join("boot"), "size=24m") else {
        support::skip("cannot mount a tmpfs");
        return;
    };
    let out = fs_.0.join("initrd.img");
    fs::write(&out, b"the previous image").unwrap();
    let mut child = build(&m, &out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the new image has bytes on disk, the room check is behind the build:
    // fill what is left.
    let started = std::time::Instant::now();
    let writing = loop {
        let growing = fs::read_dir(&fs_.0)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name().to_string_lossy().starts_with(".composer-")
                    && e.metadata().is_ok_and(|m| m.len() > 0)
            });
        if growing {
            break true;
        }
        if child.try_wait().unwrap().is_some() || started.elapsed() > Duration::from_secs(60) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(writing, "the build ended before it wrote");
    {
        use std::io::Write;
        let mut filler = fs::File::create(fs_.0.join("filler")).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while filler.write_all(&chunk).is_ok() {}
    }
    let o = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "the build fit in a full filesystem");
    assert!(e.contains("No space left"), "{e}");
    assert_eq!(fs::read(&out).unwrap(), b"the previous image");
    assert!(temporaries(&fs_.0).is_empty(), "{:?}", temporaries(&fs_.0));
}

/// `[image] max_size` refuses a larger image at its line, before writing.
#[test]
fn max_size_refuses_a_larger_image() {
    let dir = Scratch::new("faults-max-size");
    let ms = manifests(&dir, 2, 300_000);
    let out = dir.join("initrd.img");
    fs::write(&out, b"the previous image").unwrap();
    for (codec, m) in ms.iter().filter(|(c, _)| ["none", "zstd"].contains(c)) {
        fs::write(&out, b"the previous image").unwrap();
        let text = fs::read_to_string(m).unwrap();
        fs::write(m, format!("{text}\n[image]\nmax_size = \"500K\"\n")).unwrap();
        let o = support::run(&mut build(m, &out));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{codec}: {e}");
        assert!(
            e.contains(&format!("{codec}.toml:")) && e.contains("max_size = 512000 bytes"),
            "{codec}: {e}"
        );
        assert_eq!(fs::read(&out).unwrap(), b"the previous image");
        fs::write(m, format!("{text}\n[image]\nmax_size = 1000000\n")).unwrap();
        let o = support::run(&mut build(m, &out));
        assert!(
            o.status.success(),
            "{codec}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let m = dir.join("bad.toml");
    fs::write(&m, "[image]\nmax_size = \"lots\"\n").unwrap();
    let o = support::run(&mut build(&m, &out));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("bad.toml:2:") && e.contains("not a size"),
        "{e}"
    );
}

#[test]
fn a_read_only_target_fails_cleanly() {
    if !support::require_root() {
        return;
    }
    let dir = Scratch::new("faults-ro");
    let ms = manifests(&dir, 2, 10_000);
    let Some(fs_) = Tmpfs::new(&dir.join("ro"), "size=4m") else {
        support::skip("cannot mount a tmpfs");
        return;
    };
    let out = fs_.0.join("initrd.img");
    fs::write(&out, b"the previous image").unwrap();
    assert!(Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&fs_.0)
        .status()
        .unwrap()
        .success());
    let o = support::run(&mut build(&ms[0].1, &out));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Read-only file system"));
    assert_eq!(fs::read(&out).unwrap(), b"the previous image");
}

#[test]
fn killed_builds_leave_the_old_image_and_the_next_build_cleans_up() {
    let dir = Scratch::new("faults-kill");
    // About 60 MB of sources: a build takes long enough to be caught at
    // every stage (planning, copying, compressing, syncing).
    let ms = manifests(&dir, 30, 2_000_000);
    let out = dir.join("initrd.img");
    support::run_ok(&mut build(&ms[0].1, &out));
    let before = fs::read(&out).unwrap();
    fs::write(&out, b"the previous image").unwrap();
    let before_text = fs::read(&out).unwrap();
    // What each build writes when it is not interrupted.
    let refs: Vec<Vec<u8>> = ms
        .iter()
        .map(|(c, m)| {
            let r = dir.join(format!("ref-{c}.img"));
            support::run_ok(&mut build(m, &r));
            fs::read(&r).unwrap()
        })
        .collect();
    let before = {
        drop(before);
        before_text
    };
    let mut x: u64 = 0x5eed;
    for round in 0..12 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = round % ms.len();
        let (codec, m) = &ms[k];
        // What an earlier SIGKILL left stays until a build gets as far as
        // opening its output.
        let left = temporaries(&dir);
        let mut child = build(m, &out)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(5 + x % 400));
        let sig = if round % 2 == 0 { "-KILL" } else { "-TERM" };
        let _ = Command::new("kill")
            .arg(sig)
            .arg(child.id().to_string())
            .status();
        let _ = child.wait().unwrap();
        let now = fs::read(&out).unwrap();
        // Killed in time: the old image; too late: the new one, whole.
        assert!(
            now == before || now == refs[k],
            "round {round} ({codec}, {sig}): neither the old image nor the new one"
        );
        if sig == "-TERM" {
            let now = temporaries(&dir);
            assert!(
                now.iter().all(|t| left.contains(t)),
                "round {round} ({codec}): SIGTERM left {now:?} (before it: {left:?})"
            );
        }
        fs::write(&out, &before).unwrap();
    }
    // What SIGKILL left, the next build removes.
    support::run_ok(&mut build(&ms[0].1, &dir.join("next.img")));
    assert!(temporaries(&dir).is_empty(), "{:?}", temporaries(&dir));
}

#[test]
fn two_builds_to_one_output_leave_one_complete_image() {
    let dir = Scratch::new("faults-race");
    let ms = manifests(&dir, 8, 1_000_000);
    let (a, b) = (&ms[0].1, &ms[2].1);
    let (ra, rb) = (dir.join("a.img"), dir.join("b.img"));
    support::run_ok(&mut build(a, &ra));
    support::run_ok(&mut build(b, &rb));
    let (wa, wb) = (fs::read(&ra).unwrap(), fs::read(&rb).unwrap());
    assert_ne!(wa, wb);
    let out = dir.join("initrd.img");
    for round in 0..6 {
        let mut one = build(a, &out).stderr(Stdio::null()).spawn().unwrap();
        let mut two = build(b, &out).stderr(Stdio::null()).spawn().unwrap();
        assert!(one.wait().unwrap().success() && two.wait().unwrap().success());
        let got = fs::read(&out).unwrap();
        assert!(got == wa || got == wb, "round {round}: a mix of two images");
        assert!(temporaries(&dir).is_empty());
    }
}

/// A durable build queues what it wrote for writeback while it copies
/// (sync_file_range, about every 8 MiB per writer) and still ends with fsync;
/// `--no-sync` does neither. Seen with strace on a 24 MiB uncompressed image.
#[test]
fn durable_builds_write_back_while_copying() {
    let Some(strace) = support::require_tool("strace", "strace") else {
        return;
    };
    let dir = Scratch::new("faults-writeback");
    let (_, m) = manifests(&dir, 6, 4 << 20)
        .into_iter()
        .find(|(c, _)| *c == "none")
        .unwrap();
    let calls = |no_sync: bool| {
        let out = dir.join("out.img");
        let log = dir.join("strace.log");
        let mut cmd = Command::new(&strace);
        cmd.args(["-f", "-qq", "-e", "trace=sync_file_range,fsync", "-o"])
            .arg(&log)
            .arg(support::composer_bin())
            .args(["-q", "build"])
            .arg(&m)
            .arg("-o")
            .arg(&out);
        if no_sync {
            cmd.arg("--no-sync");
        }
        support::run_ok(&mut cmd);
        let text = fs::read_to_string(&log).unwrap();
        let count = |call: &str| {
            text.lines()
                .filter(|l| l.contains(&format!("{call}(")))
                .count()
        };
        (
            count("sync_file_range"),
            count("fsync"),
            fs::metadata(&out).unwrap().len(),
        )
    };
    let (ranges, fsyncs, size) = calls(false);
    assert!(size > 24 << 20, "{size}");
    // At least one queued range per 8 MiB written, and the fsyncs of file and directory.
    assert!(ranges >= 3, "{ranges} sync_file_range calls");
    assert!(fsyncs >= 2, "{fsyncs} fsync calls");
    assert_eq!(calls(true).0, 0, "--no-sync queues no writeback");
}

#[test]
fn sources_are_opened_ahead_once_and_read_in_ahead() {
    let Some(strace) = support::require_tool("strace", "strace") else {
        return;
    };
    let dir = Scratch::new("faults-readahead");
    let files = 40;
    // Larger than the writer's small-file read.
    let (_, m) = manifests(&dir, files, 100_000)
        .into_iter()
        .find(|(c, _)| *c == "none")
        .unwrap();
    let log = dir.join("strace.log");
    let mut cmd = Command::new(&strace);
    cmd.args([
        "-f",
        "-qq",
        "-e",
        "trace=open,openat,fadvise64,copy_file_range,pwrite64",
        "-o",
    ])
    .arg(&log)
    .arg(support::composer_bin())
    .args(["-q", "build"])
    .arg(&m)
    .arg("-o")
    .arg(dir.join("out.img"));
    support::run_ok(&mut cmd);
    let text = fs::read_to_string(&log).unwrap();
    let is_source =
        |l: &str| (l.contains(" open(") || l.contains(" openat(")) && l.contains("/data/f");
    // Each source is opened once, by the writer, and the kernel is asked to read it in.
    for i in 0..files {
        let name = format!("/data/f{i}\"");
        let opens = text
            .lines()
            .filter(|l| is_source(l) && l.contains(&name))
            .count();
        assert_eq!(opens, 1, "f{i} opened {opens} times:\n{text}");
    }
    let advised = text
        .lines()
        .filter(|l| l.contains("POSIX_FADV_WILLNEED"))
        .count();
    assert!(
        advised >= files,
        "{advised} WILLNEED advices for {files} sources"
    );
    // Opened ahead: many sources are open before the first byte is written
    // (through the buffer, or by copy_file_range where that shares data).
    let first_copy = text
        .lines()
        .position(|l| l.contains("copy_file_range(") || l.contains("pwrite64("))
        .expect("no write to the output");
    let before = text
        .lines()
        .take(first_copy)
        .filter(|l| is_source(l))
        .count();
    assert!(
        before >= 10,
        "{before} sources opened before the first copy:\n{text}"
    );
    // Where copy_file_range cannot share data (ext4, tmpfs) it is an in-kernel
    // copy slower than read and write: the writer does not use it there.
    let fs_type = support::fs_type(&dir);
    if ["ext2/ext3", "tmpfs"].contains(&fs_type.as_str()) {
        assert!(
            !text.contains("copy_file_range("),
            "copy_file_range on {fs_type}:\n{text}"
        );
    }
}
