//! What a systemd stub reads, by the version of systemd whose stub first
//! did: the one place that knowledge lives (the stub's version is read from
//! its `.sdmagic`).

/// `.uname` and `.sbat` are measured into PCR 11: systemd 254.
pub const UNAME_SBAT_MEASURED_SINCE: u32 = 254;
/// A `.ucode` section (CPU microcode, handed to the kernel before every
/// other initrd, and measured after `.initrd`): systemd 256.
pub const UCODE_SINCE: u32 = 256;
/// `.profile` sections (one UKI, several command lines): systemd 257.
pub const PROFILES_SINCE: u32 = 257;
