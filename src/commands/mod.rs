//! The command line: one file per subcommand, each with its arguments and
//! an `exec` that calls the library and prints what it returns.

mod args;
mod build;
mod cat;
mod check;
mod check_boot;
mod completions;
mod config;
mod deps;
mod diff;
mod export_list;
mod extract;
mod gen_init_cpio;
mod import_list;
mod inspect;
mod man;
mod plan;
mod progress;
mod schema;
mod ui;
mod uki;
mod verify;
mod why;

use clap::{CommandFactory, Parser, Subcommand};

use composer::Result;

#[derive(Parser, Debug)]
#[command(
    name = "composer",
    version,
    about = "Compose initramfs images: block-aligned newc cpio archives from a manifest or a gen_init_cpio list"
)]
pub struct Cli {
    /// Print only errors: no warnings, notes or summary.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Say more: each of a group of like warnings on its own line ("N
    /// modules ask for firmware" becomes one line per module), and how a
    /// build moved its data.
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build an archive from a manifest (TOML or YAML) or a gen_init_cpio list.
    Build(Box<build::Args>),
    /// Load and resolve a manifest without writing anything.
    Check(check::Args),
    /// Print the configuration a build reads: its documents in order, every
    /// setting and rule with the document and line it comes from, as a
    /// manifest that builds the same image.
    Config(config::Args),
    /// Print a manifest's entries as a gen_init_cpio list.
    #[command(name = "export-list")]
    ExportList(export_list::Args),
    /// Print a manifest equivalent to a gen_init_cpio list.
    #[command(name = "import-list")]
    ImportList(import_list::Args),
    /// Print the layout a build would write: offsets, padding, alignment.
    Plan(plan::Args),
    /// Print the files programs need (themselves, their loader, their
    /// libraries, symlinks on the way), found as the dynamic loader would,
    /// inside a root, without running them.
    Deps(deps::Args),
    /// Print the manifest's JSON Schema.
    Schema(schema::Args),
    /// A drop-in for the kernel's usr/gen_init_cpio: same arguments, same bytes.
    #[command(name = "gen-init-cpio")]
    GenInitCpio(gen_init_cpio::Args),
    /// List the entries of any initrd: every segment, every compression.
    Inspect(inspect::Args),
    /// Print one file of an initrd, as the unpacked image would hold it.
    Cat(cat::Args),
    /// Report everything the kernel would silently drop or reject in an initrd.
    Verify(verify::Args),
    /// Unpack an initrd into a new or empty directory, never writing outside it.
    Extract(extract::Args),
    /// Tell whether an initrd brings up this machine's root, layer by layer
    /// (controller, md, LUKS, LVM, filesystem, init, root=).
    #[command(name = "check-boot")]
    CheckBoot(check_boot::Args),
    /// Show what differs between two initrds, entry by entry.
    Diff(diff::Args),
    /// Explain why an entry, kernel module or firmware file is in a
    /// manifest's image; without a target, list its modules and firmware by size.
    Why(why::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::Args),
    /// Write man pages for composer and each subcommand into a directory.
    Man(man::Args),
}

/// Runs a parsed command line.
pub fn exec(cli: Cli) -> Result<()> {
    ui::set_quiet(cli.quiet);
    ui::set_verbose(cli.verbose);
    match cli.command {
        Command::Build(a) => build::exec(*a),
        Command::Check(a) => check::exec(a),
        Command::Config(a) => config::exec(a),
        Command::ExportList(a) => export_list::exec(a),
        Command::ImportList(a) => import_list::exec(a),
        Command::Plan(a) => plan::exec(a),
        Command::Deps(a) => deps::exec(a),
        Command::Schema(a) => schema::exec(a),
        Command::GenInitCpio(a) => gen_init_cpio::exec(a),
        Command::Inspect(a) => inspect::exec(a),
        Command::Cat(a) => cat::exec(a),
        Command::Verify(a) => verify::exec(a),
        Command::Extract(a) => extract::exec(a),
        Command::CheckBoot(a) => check_boot::exec(a),
        Command::Diff(a) => diff::exec(a),
        Command::Why(a) => why::exec(a),
        Command::Completions(a) => completions::exec(a, Cli::command()),
        Command::Man(a) => man::exec(a, Cli::command()),
    }
}
