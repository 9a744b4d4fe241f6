//! The passphrase types right: `[console]` puts a keymap (its includes inlined,
//! decompressed) and a font in the image, and both inits load them before they ask.
//!
//! The test types on the guest's keyboard, not on the serial line (a keymap only
//! changes what keys mean): /dev/console is the first virtual terminal of a VGA
//! card, qemu's monitor presses the keys (`sendkey`) and reads the text screen from
//! the card's memory (`pmemsave` of 0xb8000). The keymap swaps the Q and A keys, as
//! AZERTY does; the passphrase of the encrypted root (md RAID1 -> LUKS2 -> LVM of the
//! storage tests) has an `a`, typed with the Q key. Under the kernel's default map
//! that types a `q` and the root stays locked.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::boot_storage::{self, ENC, ENC_LUKS_UUID, PASSPHRASE};
use crate::support::{self, BootOptions, Scratch};

/// The keymap the test loads, split over an include, the top file gzip-compressed.
const LETTERS: &str = "# The Q and A keys swapped, as on an AZERTY keyboard.\n\
                       keycode 16 = a A\n\
                       keycode 30 = q Q\n";
const TOP: &str = "# composer's console test keymap\ninclude \"letters\"\n";

/// A PSF2 font of 256 glyphs, 8x16, each glyph its own bit pattern.
fn psf2_font() -> Vec<u8> {
    let mut f = Vec::new();
    for v in [0x864a_b572u32, 0, 32, 0, 256, 16, 16, 8] {
        f.extend_from_slice(&v.to_le_bytes());
    }
    for g in 0..256u32 {
        for row in 0..16u32 {
            // The space blank, as setfont expects.
            f.push(if g == 32 { 0 } else { ((g ^ row) & 0xff) as u8 });
        }
    }
    f
}

/// qemu's key for one character of the passphrase under the test keymap.
fn key_for(c: char) -> String {
    match c {
        'a' => "q".into(),
        'q' => "a".into(),
        'A' => "shift-q".into(),
        'Q' => "shift-a".into(),
        '-' => "minus".into(),
        c if c.is_ascii_uppercase() => format!("shift-{}", c.to_ascii_lowercase()),
        c if c.is_ascii_alphanumeric() => c.to_string(),
        c => panic!("no key for {c:?} in the test"),
    }
}

/// qemu's human monitor on a unix socket.
struct Monitor(UnixStream);

impl Monitor {
    fn connect(path: &Path, until: Instant) -> Option<Monitor> {
        while Instant::now() < until {
            if let Ok(s) = UnixStream::connect(path) {
                s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
                let mut m = Monitor(s);
                m.read_prompt();
                return Some(m);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    fn read_prompt(&mut self) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"(qemu) ") {
            match self.0.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    fn command(&mut self, cmd: &str) -> Option<String> {
        self.0.write_all(format!("{cmd}\n").as_bytes()).ok()?;
        Some(self.read_prompt())
    }
}

/// The rows of the VGA text screen's memory (80 columns of character and
/// attribute), as text.
fn screen_rows(dump: &[u8]) -> Vec<String> {
    dump.chunks(160)
        .map(|row| {
            row.chunks(2)
                .map(|c| match c[0] {
                    b' '..=b'~' => c[0] as char,
                    _ => ' ',
                })
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect()
}

/// What the monitor thread saw.
#[derive(Default)]
struct Seen {
    prompted: bool,
    typed: bool,
    screen: Vec<String>,
}

fn console_boot(init: &str) {
    let Some((kernel, disks)) = boot_storage::storage_env() else {
        return;
    };
    if support::require_tool("loadkeys", "kbd").is_none()
        || support::require_tool("setfont", "kbd").is_none()
    {
        return;
    }
    if init == "systemd" && support::require_tool("udevadm", "udev").is_none() {
        return;
    }
    let dir = Scratch::new(&format!("console-{init}"));
    fs::write(dir.join("letters.inc"), LETTERS).unwrap();
    let mut top = Vec::new();
    {
        let mut gz = flate2::write::GzEncoder::new(&mut top, flate2::Compression::default());
        gz.write_all(TOP.as_bytes()).unwrap();
        gz.finish().unwrap();
    }
    fs::write(dir.join("test.map.gz"), top).unwrap();
    fs::write(dir.join("test.psf"), psf2_font()).unwrap();
    // Beside the manifest (the image's programs come from the platform's root).
    let extra = "[console]\nkeymap = \"./test.map.gz\"\nfont = \"./test.psf\"\n";
    let image = boot_storage::image(&dir, &kernel, init, extra);

    // The image: the keymap as one file with its include inlined, the font as it
    // was, the configuration naming both, and the programs that load them.
    let cat = |path: &str| support::image_bytes(&image, path);
    let keymap = String::from_utf8(cat("/usr/lib/composer/keymap.map")).unwrap();
    assert!(
        keymap.contains("keycode 16 = a A") && !keymap.contains("include"),
        "the keymap in the image:\n{keymap}"
    );
    assert_eq!(cat("/usr/lib/composer/font.psf"), psf2_font());
    let conf = String::from_utf8(cat("/etc/vconsole.conf")).unwrap();
    assert!(
        conf.contains("KEYMAP=/usr/lib/composer/keymap.map")
            && conf.contains("FONT=/usr/lib/composer/font.psf"),
        "{conf}"
    );
    for p in [
        "/usr/bin/loadkeys",
        "/usr/bin/setfont",
        "/usr/lib/composer/console",
    ] {
        assert!(!cat(p).is_empty(), "{p} in the image");
    }

    let sock = dir.join("monitor.sock");
    let dump = dir.join("screen.bin");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let timeout = Duration::from_secs(if init == "systemd" { 600 } else { 300 });
    let prompt = match init {
        "systemd" => "Please enter passphrase",
        _ => "Enter passphrase for",
    };
    let token = format!("COMPOSER-ROOT-OK {} ", disks.token("enc"));
    let watcher = {
        let (sock, dump, seen, token) = (sock.clone(), dump.clone(), seen.clone(), token.clone());
        std::thread::spawn(move || {
            watch(
                &sock,
                &dump,
                &seen,
                prompt,
                &token,
                Instant::now() + timeout,
            )
        })
    };
    let mut args = disks.attach(ENC);
    for a in [
        "-device",
        "VGA",
        "-no-shutdown",
        "-monitor",
        &format!("unix:{},server=on,wait=off", sock.display()),
    ] {
        args.push(a.into());
    }
    let opts = BootOptions {
        memory_mib: 1024,
        // /dev/console is the last console= : the virtual terminal.
        extra_append: format!(
            "root=/dev/cmpenc/root rd.luks.uuid=luks-{ENC_LUKS_UUID} rd.lvm.vg=cmpenc \
             rd.timeout=90 {} console=tty1",
            boot_storage::extra_append(init)
        ),
        extra_args: args,
        timeout,
        ..Default::default()
    };
    let r = support::qemu_boot_with(&kernel, &image, &opts);
    let _ = watcher.join();
    let seen = seen.lock().unwrap();
    eprintln!(
        "--- {init}: keymap and font ({:.1} s), serial ---\n{}\n--- the text screen ---\n{}",
        r.elapsed.as_secs_f64(),
        r.console,
        seen.screen.join("\n")
    );
    assert!(seen.prompted, "{init}: no passphrase prompt on the screen");
    assert!(seen.typed, "{init}: the passphrase was not typed");
    assert!(
        seen.screen.iter().any(|l| l.contains(token.trim_end())),
        "{init}: the root did not unlock with the passphrase typed under the keymap"
    );
    for bad in [
        "could not load the keymap",
        "takes no font",
        "Failed to start composer-console",
    ] {
        assert!(
            !seen.screen.iter().any(|l| l.contains(bad)),
            "{init}: `{bad}` on the screen"
        );
    }
    assert!(
        !r.console.contains(PASSPHRASE),
        "the passphrase reached the serial console"
    );
}

/// Reads the screen every second; types the passphrase once the prompt shows;
/// quits qemu when the root's token shows (the guest is stopped at power-off,
/// -no-shutdown, so the last screen can still be read).
fn watch(
    sock: &Path,
    dump: &PathBuf,
    seen: &Mutex<Seen>,
    prompt: &str,
    token: &str,
    until: Instant,
) {
    let Some(mut mon) = Monitor::connect(sock, until) else {
        return;
    };
    while Instant::now() < until {
        std::thread::sleep(Duration::from_secs(1));
        let _ = fs::remove_file(dump);
        if mon
            .command(&format!("pmemsave 0xb8000 32768 \"{}\"", dump.display()))
            .is_none()
        {
            return;
        }
        let Ok(bytes) = fs::read(dump) else { continue };
        let rows = screen_rows(&bytes);
        let prompted = rows.iter().any(|l| l.contains(prompt));
        let done = rows.iter().any(|l| l.contains(token.trim_end()));
        // A refused passphrase (a wrong keymap) ends the boot too.
        let refused = rows
            .iter()
            .any(|l| l.contains("No key available") || l.contains("Passphrase incorrect"));
        let typed = {
            let mut s = seen.lock().unwrap();
            s.screen = rows;
            s.prompted |= prompted;
            s.typed
        };
        if done || (typed && refused) {
            let _ = mon.command("quit");
            return;
        }
        if prompted && !typed {
            // The agent has the terminal once its prompt is drawn.
            std::thread::sleep(Duration::from_secs(2));
            for c in PASSPHRASE.chars() {
                mon.command(&format!("sendkey {}", key_for(c)));
                std::thread::sleep(Duration::from_millis(150));
            }
            mon.command("sendkey ret");
            seen.lock().unwrap().typed = true;
        }
    }
}

#[test]
fn shell_init_loads_the_keymap_and_font_before_the_passphrase_prompt() {
    console_boot("shell");
}

#[test]
fn systemd_loads_the_keymap_and_font_before_the_passphrase_prompt() {
    console_boot("systemd");
}
