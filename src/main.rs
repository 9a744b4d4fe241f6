//! The `composer` binary: parses the command line, runs the command, and
//! renders errors (clap's and composer's in one style) with exit codes.

mod commands;

use std::io::Write;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use commands::Cli;

/// On SIGINT, SIGTERM and SIGHUP: remove the temporary files of images
/// being written, then end as the signal would have.
fn clean_up_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            composer::write::remove_temporaries();
            let _ = signal_hook::low_level::emulate_default_handler(sig);
            std::process::exit(128 + sig);
        }
    });
}

/// Exit status: `verify` found problems, `diff` found differences.
const FOUND: u8 = 1;
/// Exit status: a usage error, bad input, an I/O failure.
const TROUBLE: u8 = 2;

fn main() -> ExitCode {
    clean_up_on_signals();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match commands::exec(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "composer: error: {err}");
            if let Some(hint) = err.hint() {
                let _ = writeln!(stderr, "  hint: {hint}");
            }
            if err.is_finding() {
                ExitCode::from(FOUND)
            } else {
                ExitCode::from(TROUBLE)
            }
        }
    }
}

/// A command line clap refused, in composer's words; help and version go
/// to standard output as clap prints them.
fn usage_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(TROUBLE);
        }
        _ => {}
    }
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    let _ = write!(std::io::stderr().lock(), "composer: error: {text}");
    ExitCode::from(TROUBLE)
}
