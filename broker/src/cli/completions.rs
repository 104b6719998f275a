//! `tessera completions SHELL`: prints a completion script for the shell,
//! generated from the command tree itself.
//!
//! Why its own file: the family owns its clap type and its run. The tree is
//! handed in by `cli/mod.rs` (which defines it), so this file does not import
//! its parent.

use clap::Args;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// Prints the completion script of `command` (the whole `tessera` tree).
pub fn run(args: CompletionsArgs, mut command: clap::Command) -> ExitCode {
    clap_complete::generate(args.shell, &mut command, "tessera", &mut std::io::stdout());
    ExitCode::SUCCESS
}
