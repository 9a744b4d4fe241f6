use std::process::ExitCode;

use clap::Parser;
use composer::cli::{self, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("composer: error: {err}");
            if let Some(hint) = err.hint() {
                eprintln!("  hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}
