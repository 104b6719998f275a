//! The `tessera` binary: parse the command line and dispatch. Nothing else.

use clap::Parser;
use tessera_broker::cli::{self, Cli};

// The request path allocates many small, short-lived strings (claims, audit
// fields, SQL arguments); mimalloc serves them with less contention between
// the runtime's threads than the system allocator (see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match Cli::try_parse() {
        Ok(command) => cli::run(command),
        Err(e) => cli::usage_error(e),
    }
}
