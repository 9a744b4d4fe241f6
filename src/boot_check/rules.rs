//! What the kernel command line (and the image's crypttab) lets the init
//! bring up, as both inits read it (the book's storage page): `rd.luks=0`,
//! `rd.luks.uuid=` and `rd.luks.name=`, `rd.luks.crypttab=0`, `rd.lvm=0`,
//! `rd.lvm.vg=`, `rd.lvm.lv=`, `rd.md=0` and `rd.md.uuid=`. A layer they
//! leave down fails the check even when the image has all it needs: the
//! boot waits for it and ends in the emergency shell.

use std::collections::HashSet;

use crate::stack::{CryptKind, CrypttabEntry, DeviceSpec, Kind, LayerId, Stack};

/// The storage options of one command line.
#[derive(Debug, Default)]
pub(super) struct Rules {
    luks_off: bool,
    /// `rd.luks.uuid=` and the UUIDs of `rd.luks.name=UUID=NAME`, lower
    /// case, without a `luks-` prefix.
    luks_uuids: Vec<String>,
    crypttab_off: bool,
    lvm_off: bool,
    vgs: Vec<String>,
    /// `VG/LV`.
    lvs: Vec<String>,
    md_off: bool,
    /// Hex digits only, lower case.
    md_uuids: Vec<String>,
}

fn off(v: &str) -> bool {
    matches!(v, "0" | "no")
}

/// An md UUID as hex digits only, whatever the separators.
fn md_hex(u: &str) -> String {
    u.chars()
        .filter(|c| !matches!(c, ':' | '.' | '-'))
        .flat_map(char::to_lowercase)
        .collect()
}

fn luks_uuid(u: &str) -> String {
    u.strip_prefix("luks-").unwrap_or(u).to_ascii_lowercase()
}

impl Rules {
    pub(super) fn of(cmdline: &str) -> Rules {
        let mut r = Rules::default();
        for w in cmdline.split_whitespace() {
            let Some((k, v)) = w.split_once('=') else {
                continue;
            };
            match k {
                "rd.luks" => r.luks_off = off(v),
                "rd.luks.uuid" => r.luks_uuids.push(luks_uuid(v)),
                "rd.luks.name" => {
                    if let Some((u, _)) = v.split_once('=') {
                        r.luks_uuids.push(luks_uuid(u));
                    }
                }
                "rd.luks.crypttab" => r.crypttab_off = off(v),
                "rd.lvm" => r.lvm_off = off(v),
                "rd.lvm.vg" => r.vgs.push(v.to_string()),
                "rd.lvm.lv" => r.lvs.push(v.trim_start_matches("/dev/").to_string()),
                "rd.md" => r.md_off = off(v),
                "rd.md.uuid" => r.md_uuids.push(md_hex(v)),
                _ => {}
            }
        }
        r
    }

    /// The LVM layers `rd.lvm.lv=` names, with the hidden ones of their VG
    /// below them (a thin pool, its data and metadata, raid images): lvm
    /// activates those with the LV.
    fn named_lvs(&self, stack: &Stack) -> HashSet<LayerId> {
        let mut named = HashSet::new();
        let mut todo: Vec<LayerId> = (0..stack.layers.len())
            .filter(|&i| {
                matches!(&stack.layers[i].kind, Kind::Lvm(v)
                    if self.lvs.iter().any(|n| *n == format!("{}/{}", v.vg, v.lv)))
            })
            .collect();
        while let Some(id) = todo.pop() {
            if id >= stack.layers.len() || !named.insert(id) {
                continue;
            }
            let Kind::Lvm(v) = &stack.layers[id].kind else {
                continue;
            };
            for &b in &stack.layers[id].below {
                if matches!(&stack.layers.get(b).map(|l| &l.kind), Some(Kind::Lvm(w)) if w.vg == v.vg)
                {
                    todo.push(b);
                }
            }
        }
        named
    }

    /// Why the init leaves layer `id` down, if it does. `crypttab` is the
    /// image's.
    pub(super) fn rules_out(
        &self,
        stack: &Stack,
        id: LayerId,
        crypttab: &[CrypttabEntry],
    ) -> Option<String> {
        match &stack.layers.get(id)?.kind {
            Kind::Crypt(c) => {
                if self.luks_off {
                    return Some("the command line turns LUKS off (rd.luks=0)".into());
                }
                // rd.luks.uuid= and the crypttab rule name LUKS headers by UUID;
                // a plain or other dm-crypt device has none.
                if !matches!(c.kind, CryptKind::Luks1 | CryptKind::Luks2) {
                    return None;
                }
                let uuid = c.luks_uuid.as_deref().map(luks_uuid).unwrap_or_default();
                if !self.luks_uuids.is_empty() {
                    return (!self.luks_uuids.contains(&uuid)).then(|| {
                        format!(
                            "rd.luks.uuid= names only {}, not this device",
                            self.luks_uuids.join(", ")
                        )
                    });
                }
                let by_uuid = |d: &DeviceSpec| match d {
                    DeviceSpec::Uuid(u) => luks_uuid(u) == uuid,
                    DeviceSpec::Path(p) => p
                        .strip_prefix("/dev/disk/by-uuid/")
                        .is_some_and(|u| luks_uuid(u) == uuid),
                    _ => false,
                };
                if self.crypttab_off || crypttab.is_empty() || uuid.is_empty() {
                    return None;
                }
                (!crypttab.iter().any(|l| by_uuid(&l.device))).then(|| {
                    let names: Vec<&str> = crypttab.iter().map(|l| l.name.as_str()).collect();
                    format!(
                        "the image's /etc/crypttab names other devices only ({}): \
                         without rd.luks.uuid= the init unlocks what it names",
                        names.join(", ")
                    )
                })
            }
            Kind::Lvm(v) => {
                if self.lvm_off {
                    return Some("the command line turns LVM off (rd.lvm=0)".into());
                }
                if !self.lvs.is_empty() {
                    return (!self.named_lvs(stack).contains(&id)).then(|| {
                        format!(
                            "rd.lvm.lv= names only {}, not {}/{}",
                            self.lvs.join(", "),
                            v.vg,
                            v.lv
                        )
                    });
                }
                (!self.vgs.is_empty() && !self.vgs.contains(&v.vg)).then(|| {
                    format!(
                        "rd.lvm.vg= names only {}, not {}",
                        self.vgs.join(", "),
                        v.vg
                    )
                })
            }
            Kind::Md(m) => {
                if self.md_off {
                    return Some("the command line turns md RAID off (rd.md=0)".into());
                }
                let uuid = m.uuid.as_deref().map(md_hex).unwrap_or_default();
                (!self.md_uuids.is_empty() && !self.md_uuids.contains(&uuid)).then(|| {
                    format!(
                        "rd.md.uuid= names only {}, not this array",
                        self.md_uuids.join(", ")
                    )
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{Crypt, CryptKind, Layer, LvKind, Lvm, Md};

    const LUKS: &str = "5A1E0001-0000-4000-8000-00000000E001";

    fn layer(kind: Kind, below: Vec<LayerId>) -> Layer {
        Layer {
            kind,
            sys: None,
            dev: String::new(),
            below,
        }
    }

    fn lv(vg: &str, lv: &str, kind: LvKind) -> Kind {
        Kind::Lvm(Lvm {
            vg: vg.into(),
            lv: lv.into(),
            kind,
            vg_uuid: String::new(),
            lv_uuid: String::new(),
        })
    }

    /// md RAID1 -> LUKS -> a thin LV over its pool (data and metadata), and
    /// a plain LV beside it: layers 0 thin, 1 pool, 2 tdata, 3 tmeta,
    /// 4 LUKS, 5 md, 6 plain.
    fn stack() -> Stack {
        Stack {
            layers: vec![
                layer(lv("vg", "thin", LvKind::Thin), vec![1]),
                layer(lv("vg", "pool", LvKind::ThinPool), vec![2, 3]),
                layer(lv("vg", "pool_tdata", LvKind::ThinPoolData), vec![4]),
                layer(lv("vg", "pool_tmeta", LvKind::ThinPoolMeta), vec![4]),
                layer(
                    Kind::Crypt(Crypt {
                        name: "cryptroot".into(),
                        kind: CryptKind::Luks2,
                        luks_uuid: Some(LUKS.into()),
                        crypttab: None,
                        ciphers: Vec::new(),
                        tpm2_token: false,
                        clevis_token: false,
                    }),
                    vec![5],
                ),
                layer(
                    Kind::Md(Md {
                        name: "md127".into(),
                        level: "raid1".into(),
                        metadata: "1.2".into(),
                        uuid: Some("1d0c00e1:2b3e4f50:61728394:a5b6c7d8".into()),
                        array_name: None,
                    }),
                    vec![],
                ),
                layer(lv("vg", "plain", LvKind::Linear), vec![4]),
            ],
            tops: vec![0],
            ..Stack::default()
        }
    }

    /// The layers `cmdline` rules out, with no crypttab in the image.
    fn out(cmdline: &str) -> Vec<LayerId> {
        let s = stack();
        let r = Rules::of(cmdline);
        (0..s.layers.len())
            .filter(|&i| r.rules_out(&s, i, &[]).is_some())
            .collect()
    }

    #[test]
    fn nothing_narrows_nothing() {
        assert!(out("root=/dev/vg/thin rd.auto rd.timeout=10").is_empty());
    }

    #[test]
    fn switches_turn_a_kind_of_layer_off() {
        assert_eq!(out("rd.lvm=0"), [0, 1, 2, 3, 6]);
        assert_eq!(out("rd.luks=no"), [4]);
        assert_eq!(out("rd.md=0"), [5]);
        assert!(out("rd.lvm=1 rd.md=yes").is_empty());
    }

    #[test]
    fn luks_uuids_are_matched_without_prefix_or_case() {
        assert!(out(&format!("rd.luks.uuid=luks-{}", LUKS.to_lowercase())).is_empty());
        assert!(out(&format!("rd.luks.name={LUKS}=root")).is_empty());
        assert_eq!(out("rd.luks.uuid=failme"), [4]);
        let why = Rules::of("rd.luks.uuid=failme")
            .rules_out(&stack(), 4, &[])
            .unwrap();
        assert!(why.contains("failme"), "{why}");
    }

    #[test]
    fn a_plain_dm_crypt_device_is_not_a_luks_uuid_s_business() {
        let mut s = stack();
        if let Kind::Crypt(c) = &mut s.layers[4].kind {
            c.kind = CryptKind::Plain;
            c.luks_uuid = None;
        }
        let (other, _) = crate::stack::parse_crypttab("other UUID=1234 none luks\n");
        assert_eq!(Rules::of("rd.luks.uuid=1234").rules_out(&s, 4, &[]), None);
        assert_eq!(Rules::of("").rules_out(&s, 4, &other), None);
        assert!(Rules::of("rd.luks=0").rules_out(&s, 4, &[]).is_some());
    }

    #[test]
    fn md_uuids_are_matched_whatever_the_separators() {
        assert!(out("rd.md.uuid=1D0C00E1-2B3E-4F50-6172-8394A5B6C7D8").is_empty());
        assert_eq!(out("rd.md.uuid=failme"), [5]);
    }

    #[test]
    fn a_named_lv_brings_the_hidden_layers_under_it() {
        assert_eq!(out("rd.lvm.lv=vg/thin"), [6]);
        assert_eq!(out("rd.lvm.lv=/dev/vg/plain"), [0, 1, 2, 3]);
        assert_eq!(out("rd.lvm.lv=vg/failme"), [0, 1, 2, 3, 6]);
        // rd.lvm.lv= wins over rd.lvm.vg=, as in both inits.
        assert_eq!(out("rd.lvm.vg=vg rd.lvm.lv=vg/thin"), [6]);
        assert!(out("rd.lvm.vg=vg").is_empty());
        assert_eq!(out("rd.lvm.vg=failme"), [0, 1, 2, 3, 6]);
    }

    #[test]
    fn an_image_crypttab_naming_other_devices_leaves_this_one_locked() {
        let s = stack();
        let (other, _) = crate::stack::parse_crypttab("other UUID=1234 none luks\n");
        let (this, _) = crate::stack::parse_crypttab(&format!(
            "a UUID=1234 none luks\nb /dev/disk/by-uuid/{} none luks\n",
            LUKS.to_lowercase()
        ));
        let none = Rules::of("");
        let why = none.rules_out(&s, 4, &other).unwrap();
        assert!(why.contains("(other)"), "{why}");
        assert_eq!(none.rules_out(&s, 4, &this), None);
        // rd.luks.uuid= and rd.luks.crypttab=0 set the image's crypttab aside.
        assert_eq!(
            Rules::of(&format!("rd.luks.uuid={LUKS}")).rules_out(&s, 4, &other),
            None
        );
        assert_eq!(
            Rules::of("rd.luks.crypttab=0").rules_out(&s, 4, &other),
            None
        );
    }
}
