//! The kernel command line a root boots with, for what composer builds or
//! checks for it.

use std::path::Path;

use crate::resolve::root::Root;

/// Words of a running boot's command line that belong to that boot alone: its
/// boot loader's (`BOOT_IMAGE=`, `initrd=`) and its own initrd's (`rdinit=`).
const THIS_BOOT_ONLY: [&str; 3] = ["BOOT_IMAGE=", "initrd=", "rdinit="];

/// The root's kernel command line: its `/etc/kernel/cmdline` (as
/// kernel-install reads it), else, for the running root (`/`), the running
/// boot's `/proc/cmdline` without the words that belong to that boot alone.
/// None when neither is there.
pub fn of_root(root: &Path) -> Option<String> {
    let file = Root::new(root)
        .resolve(Path::new("/etc/kernel/cmdline"), true)
        .ok()
        .and_then(|p| crate::stack::read_bounded(&p, 64 << 10));
    if let Some(b) = file {
        return Some(one_line(&String::from_utf8_lossy(&b)));
    }
    if root == Path::new("/") {
        let running = std::fs::read_to_string("/proc/cmdline").ok()?;
        return Some(without_this_boot(&running));
    }
    None
}

/// The words of `text` on one line, as the kernel takes them.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `running` without the words that name that boot's loader and initrd.
pub fn without_this_boot(running: &str) -> String {
    running
        .split_whitespace()
        .filter(|w| !THIS_BOOT_ONLY.iter().any(|p| w.starts_with(p)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_boots_own_words_are_dropped() {
        assert_eq!(
            without_this_boot(
                "BOOT_IMAGE=/vmlinuz-6.1 root=UUID=1 ro initrd=\\initrd.img rdinit=/agent quiet\n"
            ),
            "root=UUID=1 ro quiet"
        );
    }

    #[test]
    fn etc_kernel_cmdline_wins_and_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(of_root(dir.path()), None);
        std::fs::create_dir_all(dir.path().join("etc/kernel")).unwrap();
        std::fs::write(
            dir.path().join("etc/kernel/cmdline"),
            "root=LABEL=r  ro\nquiet\n",
        )
        .unwrap();
        assert_eq!(
            of_root(dir.path()).as_deref(),
            Some("root=LABEL=r ro quiet")
        );
    }
}
