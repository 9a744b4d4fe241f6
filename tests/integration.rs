//! The integration tests: one binary, one module per topic, shared helpers in
//! `support` (and the list corpus in `corpus`), as ripgrep lays out its tests.
//! Run one topic with `cargo test --test integration golden::`.

mod corpus;
#[path = "support/craft.rs"]
mod craft;
#[path = "support/md5.rs"]
mod md5;
#[path = "support/newc.rs"]
mod newc;
mod support;

mod architecture;
mod book_reference;
mod boot_console;
mod boot_hostonly_stack;
mod boot_list;
mod boot_network;
mod boot_pcr_policy;
mod boot_policy;
mod boot_releases;
mod boot_root;
mod boot_storage;
mod boot_tpm2;
mod boot_usr;
mod check_boot;
mod check_matrix;
mod cli;
mod composition;
mod cross_arch;
mod deb_package;
mod elf_boot;
mod elf_ldd;
mod elf_root;
mod elf_why;
mod extract;
mod extract_hostile;
mod faults;
mod fuzz_regressions;
mod gen_init_cpio_compat;
mod golden;
mod hooks;
mod hostonly;
mod image_roots;
mod init_cmdline;
mod inspect_diff;
mod inspect_tools;
mod kmod_boot;
mod kmod_depmod;
mod kmod_host;
mod kmod_manifest;
mod kmod_modprobe;
mod kmod_releases;
mod malformed;
mod manifest_errors;
mod manifest_examples;
mod manifest_import;
mod omit;
mod planner_boot;
mod planner_modules;
mod planner_reflink;
mod planner_report;
mod profiles;
mod properties;
mod reliability;
mod segments;
mod segments_boot;
mod system_config;
mod uki;
mod verify_kunit;
