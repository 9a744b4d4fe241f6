//! What `composer plan` says when readers mode cannot align every file: with no
//! directory in the image to repeat as padding and names too short to hold it, a file
//! misses, and the plan names it, says why and what to do; kernel-only mode aligns it.
//! `composer build` gives the same reason and writes the layout the plan showed.

use crate::support;

use std::fs;

use support::Scratch;

#[test]
fn an_impossible_alignment_is_explained() {
    let dir = Scratch::new("planner_report");
    // Files at the root of the archive and no directory: `s` (small) and two names
    // fill the block before `a`, but `a` ends 100 bytes into a block and the rest of
    // that block is more than the name of `b` can hold.
    fs::write(dir.join("s"), vec![5u8; 61_000]).unwrap();
    fs::write(dir.join("a"), vec![7u8; 65_636]).unwrap();
    fs::write(dir.join("b"), vec![9u8; 70_000]).unwrap();
    let list = dir.join("list");
    fs::write(
        &list,
        format!(
            "file /s {} 0644 0 0\nfile /a {} 0644 0 0\nfile /b {} 0644 0 0\n",
            dir.join("s").display(),
            dir.join("a").display(),
            dir.join("b").display()
        ),
    )
    .unwrap();
    let plan = |mode: &str| {
        let out = support::run_ok(
            support::composer()
                .args([
                    "plan",
                    "--json",
                    "-t",
                    "0",
                    "-a",
                    "65536",
                    "--align-mode",
                    mode,
                ])
                .arg("--list")
                .arg(&list),
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let readers = plan("readers");
    let s = &readers["summary"];
    assert_eq!(s["eligible"], 2);
    assert_eq!(s["missed"], 1, "{s}");
    let notes = s["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{s}");
    let note = notes[0].as_str().unwrap();
    for part in [
        "1 of 2 files cannot be aligned in readers mode",
        "/b",
        "no directory entry to repeat",
        "add a directory",
        "kernel-only",
    ] {
        assert!(note.contains(part), "`{part}` missing from: {note}");
    }
    let text = support::run_ok(
        support::composer()
            .args(["plan", "--summary", "-t", "0", "-a", "65536"])
            .args(["--align-mode", "readers", "--list"])
            .arg(&list),
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("1 missed"), "{text}");
    assert!(text.contains("which assumes every file aligned"), "{text}");
    assert!(
        text.contains("note: ") && text.contains("no directory entry"),
        "{text}"
    );

    let kernel = plan("kernel-only");
    assert_eq!(kernel["summary"]["missed"], 0);
    assert_eq!(kernel["summary"]["notes"].as_array().unwrap().len(), 0);

    // The build says the same and writes what the plan showed.
    let img = dir.join("out.img");
    let out = support::run_ok(
        support::composer()
            .args(["build", "-t", "0", "-a", "65536", "--align-mode", "readers"])
            .arg("--list")
            .arg(&list)
            .arg("-o")
            .arg(&img),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no directory entry to repeat"), "{err}");
    assert!(
        err.contains("b: best-effort alignment 65536 missed"),
        "{err}"
    );
    let bytes = fs::read(&img).unwrap();
    assert_eq!(bytes.len() as u64, s["archive_bytes"].as_u64().unwrap());
    for r in readers["records"].as_array().unwrap() {
        let at = r["data_offset"].as_u64().unwrap() as usize;
        let want = fs::read(dir.join(r["name"].as_str().unwrap())).unwrap();
        assert_eq!(&bytes[at..at + want.len()], &want[..], "{}", r["name"]);
    }
}

/// `align = "auto"` without `-o`: the plan is for the current directory's filesystem,
/// and says so; with `-o` it is for the output's, silently.
#[test]
fn auto_alignment_without_an_output_plans_for_here() {
    let dir = Scratch::new("planner_auto");
    fs::write(dir.join("big"), vec![3u8; 100_000]).unwrap();
    let m = dir.join("m.toml");
    fs::write(
        &m,
        format!(
            "[defaults]\nalign = \"auto\"\n[[file]]\nsrc = {}\ndst = \"/big\"\n",
            support::toml_str(dir.join("big").to_str().unwrap())
        ),
    )
    .unwrap();
    let block = rustix::fs::statvfs(&*dir).unwrap().f_bsize;
    let plan = |out: Option<&std::path::Path>| {
        let mut cmd = support::composer();
        cmd.current_dir(&*dir).args(["plan", "--json"]).arg(&m);
        if let Some(o) = out {
            cmd.arg("-o").arg(o);
        }
        let out = support::run_ok(&mut cmd);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v, String::from_utf8(out.stderr).unwrap())
    };
    let (here, note) = plan(None);
    assert_eq!(here["summary"]["eligible"], 1, "{here}");
    assert_eq!(here["summary"]["aligned"], 1, "{here}");
    let big = here["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "big")
        .unwrap();
    assert_eq!(big["data_offset"].as_u64().unwrap() % block, 0, "{big}");
    assert!(
        note.contains(&format!(
            "planned for the current directory's ({block} bytes)"
        )),
        "{note}"
    );
    let (there, quiet) = plan(Some(&dir.join("out.img")));
    assert_eq!(there["records"], here["records"]);
    assert!(quiet.is_empty(), "{quiet}");
}
