//! `dra`: the agent binary.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "dra", version, about = "Diameter Routing Agent with an XDP rate-limiting fast path")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a config file: prints "ok" and a summary, or every error with
    /// file:line:column (exit code 2).
    CheckConfig {
        /// Path to the TOML config.
        file: PathBuf,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::CheckConfig { file } => match dra::config::load(&file) {
            Ok(cfg) => {
                println!("ok");
                print!("{}", cfg.summary());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprint!("{e}");
                Ok(ExitCode::from(2))
            }
        },
    }
}
