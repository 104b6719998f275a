//! The `tessera` binary: parse the command line and dispatch. Nothing else.

use clap::Parser;
use tessera_broker::cli::{self, Cli};

fn main() -> std::process::ExitCode {
    cli::run(Cli::parse())
}
