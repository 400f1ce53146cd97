//! `dra`: the agent binary.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use dra::config::{Checked, Setup};
use dra::dataplane::{self, AttachMode, Dataplane, Maps};

/// mimalloc: the relay allocates and frees small buffers for every message; with glibc
/// malloc its bin consolidation took a third of a capped agent's samples under load.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "dra",
    version,
    about = "Diameter Routing Agent with an XDP rate-limiting fast path"
)]
struct Cli {
    /// Log line format on stderr: text, or one JSON object per line (for log collectors).
    #[arg(long, value_enum, global = true, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    /// Native (driver) XDP, falling back to generic (skb) XDP.
    Auto,
    Native,
    Skb,
}

#[derive(Subcommand)]
enum Cmd {
    /// Validate a config file: prints "ok" and a summary, or every error with
    /// file:line:column (exit code 2).
    CheckConfig {
        /// Path to the TOML config.
        file: PathBuf,
    },
    /// Attach the fast path (or reuse the pinned one), apply the config, drive
    /// dynamic throttling and serve metrics until SIGINT/SIGTERM.
    Run {
        /// Path to the TOML config.
        #[arg(long)]
        config: PathBuf,
        /// Interface facing the gateways (overrides [fast_path] interface).
        #[arg(long)]
        iface: Option<String>,
        /// XDP attach mode (overrides [fast_path] xdp_mode).
        #[arg(long, value_enum)]
        xdp_mode: Option<Mode>,
        /// bpffs directory for the pinned programs and maps.
        #[arg(long, default_value = dataplane::PIN_DIR)]
        pin_dir: PathBuf,
        /// Detach and unpin everything on exit (default: stay attached so a restart
        /// has no gap and keeps the buckets' state).
        #[arg(long)]
        detach_on_exit: bool,
    },
    /// Remove the pinned fast path (detaches XDP, deletes the maps).
    Detach {
        /// Only this interface's link (maps are removed in any case).
        #[arg(long)]
        iface: Option<String>,
        #[arg(long, default_value = dataplane::PIN_DIR)]
        pin_dir: PathBuf,
    },
    /// Load every eBPF program into this kernel (the verifier's verdict) without
    /// attaching: prints the kernel release, the features it has, each program's verdict
    /// and instructions processed; exit code 1 if any program does not load.
    Verify,
    /// Print the running agent's status (peers, states, rates, pending) from its
    /// control socket.
    Status {
        /// Control socket path (default: [control] socket of --config).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Config file naming the control socket.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Make the running agent (`dra run`) read its config file again and apply the
    /// difference live (same as SIGHUP): prints what changed, or every validation
    /// error with file:line:column, or what cannot change without a restart (exit
    /// code 1; the running config stays).
    Reload {
        /// Control socket path (default: [control] socket of --config).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Config file naming the control socket (the agent reads the file it was
        /// started with).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the difference without applying it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the pinned fast path's global counters.
    Stats {
        #[arg(long, default_value = dataplane::PIN_DIR)]
        pin_dir: PathBuf,
    },
    /// Write the man pages (dra.1, dra-run.1, ...) into DIR (used by `cargo xtask package`).
    #[command(hide = true)]
    Man {
        /// Output directory (created if missing).
        dir: PathBuf,
    },
}

/// Logs go to stderr (the journal under systemd); `RUST_LOG` overrides the level (info).
/// JSON: one object per line with timestamp, level, message, the event's fields at the
/// top level, target, and the enclosing span (e.g. a peer connection's fields).
fn init_logs(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => b
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    if !matches!(cli.cmd, Cmd::Run { .. }) {
        // A command whose output is piped into `head` ends quietly when the reader goes
        // away, as `cat` does (Rust ignores SIGPIPE, so println! would panic). `dra run`
        // keeps ignoring it: a peer closing its socket must be an error, not a signal.
        // SAFETY: no other thread exists yet; SIG_DFL is a valid disposition.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.cmd {
        Cmd::CheckConfig { file } => match dra::config::load_for(&file, &Setup::File) {
            Ok(Checked {
                config: cfg,
                warnings,
            }) => {
                println!("ok");
                for w in warnings {
                    eprintln!("warning: {w}");
                }
                for w in cfg.warnings() {
                    eprintln!("warning: {w}");
                }
                let sctp = cfg.sctp_users();
                if !sctp.is_empty()
                    && let Err(e) = dra::transport::sctp::supported()
                {
                    eprintln!(
                        "warning: {} use SCTP, and on this host {e}: dra run would not start here",
                        sctp.join(", ")
                    );
                }
                print!("{}", cfg.summary());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprint!("{e}");
                Ok(ExitCode::from(2))
            }
        },
        Cmd::Run {
            config,
            iface,
            xdp_mode,
            pin_dir,
            detach_on_exit,
        } => {
            // Refuses a config with a limit that nothing in this setup would enforce.
            let setup = Setup::Run {
                iface: iface.clone(),
            };
            let cfg = match dra::config::load_for(&config, &setup) {
                Ok(Checked { config, warnings }) => {
                    for w in warnings {
                        tracing::warn!("config: {w}");
                    }
                    config
                }
                Err(e) => {
                    eprint!("{e}");
                    eprintln!("dra run: not started (errors above)");
                    return Ok(ExitCode::from(2));
                }
            };
            let mode = match xdp_mode {
                Some(Mode::Auto) => AttachMode::Auto,
                Some(Mode::Native) => AttachMode::Native,
                Some(Mode::Skb) => AttachMode::Skb,
                None => match cfg.fast_path.xdp_mode {
                    dra::config::XdpMode::Auto => AttachMode::Auto,
                    dra::config::XdpMode::Native => AttachMode::Native,
                    dra::config::XdpMode::Skb => AttachMode::Skb,
                },
            };
            // SCTP listeners and peers need the kernel's SCTP (exit code 3 as below).
            let sctp = cfg.sctp_users();
            if !sctp.is_empty()
                && let Err(e) = dra::transport::sctp::supported()
            {
                tracing::error!(
                    "dra run: not started: {} use SCTP, and {e}",
                    sctp.join(", ")
                );
                return Ok(ExitCode::from(3));
            }
            // What this kernel can load, before anything is: a refusal names the missing
            // feature (exit code 3: restarting on the same kernel would not help).
            let xdp_iface = iface.clone().or_else(|| cfg.fast_path.interface.clone());
            let fallback = match dra::run::check_kernel(&cfg, xdp_iface.as_deref(), &pin_dir) {
                Ok(dra::run::KernelCheck::Ok) => None,
                Ok(dra::run::KernelCheck::Fallback(u)) => {
                    // The agent's limiter takes the ingress limits: the config must hold
                    // without XDP (a connection guard does not).
                    if let Err(e) = dra::config::load_for(&config, &Setup::Fallback) {
                        eprint!("{e}");
                        eprintln!(
                            "dra run: not started: {u}, and with fallback = \"userspace\" \
                             the limits above would not be enforced"
                        );
                        return Ok(ExitCode::from(2));
                    }
                    Some(u)
                }
                Err(e) => {
                    tracing::error!("dra run: not started: {e}");
                    return Ok(ExitCode::from(3));
                }
            };
            let opts = dra::run::RunOptions {
                iface,
                mode,
                pin_dir,
                detach_on_exit,
                config_path: Some(std::path::absolute(&config).unwrap_or(config)),
                fallback,
            };
            // Through the log, so that a collector reading --log-format json sees it too.
            if let Err(e) = dra::run::run(cfg, opts) {
                tracing::error!(error = %dra::error_chain(&e), "dra run failed");
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Detach { iface, pin_dir } => {
            let removed = Dataplane::detach(iface.as_deref(), &pin_dir)
                .map_err(|e| anyhow::anyhow!(dra::error_chain(&e)))?;
            if removed.is_empty() {
                println!("nothing pinned under {}", pin_dir.display());
            }
            for p in removed {
                println!("removed {}", p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Verify => {
            let kernel = dataplane::kernel::KernelFeatures::probe();
            let verdicts = dataplane::verify::verify(&kernel)
                .map_err(|e| anyhow::anyhow!(dra::error_chain(&e)))?;
            print!("{}", dataplane::verify::report(&kernel, &verdicts));
            let failed = verdicts
                .iter()
                .filter(|(_, v)| !matches!(v, dataplane::verify::Verdict::Loaded { .. }))
                .count();
            if failed > 0 {
                eprintln!(
                    "dra verify: {failed} of {} programs do not load on this kernel",
                    verdicts.len()
                );
                return Ok(ExitCode::FAILURE);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Reload {
            socket,
            config,
            dry_run,
        } => {
            // The agent validates the file itself (and reports its errors): only the
            // socket's path is taken from it here, even from a file with errors.
            let lenient = match (&socket, &config) {
                (None, Some(c)) => std::fs::read_to_string(c)
                    .ok()
                    .and_then(|t| t.parse::<toml::Table>().ok())
                    .and_then(|t| t.get("control")?.get("socket")?.as_str().map(PathBuf::from)),
                _ => None,
            };
            let path = match lenient {
                Some(p) => p,
                None => match control_socket(socket, config.as_deref())? {
                    Ok(p) => p,
                    Err(code) => return Ok(code),
                },
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let request = if dry_run {
                "reload --dry-run"
            } else {
                "reload"
            };
            let (ok, text) = rt
                .block_on(dra::agent::control_request(&path, request))
                .with_context(|| format!("control socket {}", path.display()))?;
            if ok {
                print!("{text}");
                Ok(ExitCode::SUCCESS)
            } else {
                eprint!("{text}");
                Ok(ExitCode::FAILURE)
            }
        }
        Cmd::Status { socket, config } => {
            let path = match control_socket(socket, config.as_deref())? {
                Ok(p) => p,
                Err(code) => return Ok(code),
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let text = rt
                .block_on(dra::agent::query_status(&path))
                .with_context(|| format!("control socket {}", path.display()))?;
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Stats { pin_dir } => {
            let maps =
                Maps::open_pinned(&pin_dir).map_err(|e| anyhow::anyhow!(dra::error_chain(&e)))?;
            for (c, v) in maps
                .stats()
                .map_err(|e| anyhow::anyhow!(dra::error_chain(&e)))?
            {
                println!("{:<20} {v}", c.name());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
            clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), &dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The control socket: `--socket`, or `[control] socket` of `--config` (a config
/// that does not validate: its errors printed, exit code 2).
fn control_socket(
    socket: Option<PathBuf>,
    config: Option<&std::path::Path>,
) -> anyhow::Result<Result<PathBuf, ExitCode>> {
    Ok(match (socket, config) {
        (Some(s), _) => Ok(s),
        (None, Some(c)) => match dra::config::load(c) {
            Ok(cfg) => Ok(cfg
                .control
                .socket
                .context("the config has no [control] socket")?),
            Err(e) => {
                eprint!("{e}");
                Err(ExitCode::from(2))
            }
        },
        (None, None) => anyhow::bail!("give --socket or --config"),
    })
}
