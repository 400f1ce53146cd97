//! A freeDiameterd (package freediameterd, `cargo xtask setup`) in a network namespace,
//! for the interop tests.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use dra_tools::netns::Netns;

/// A freeDiameterd process in a namespace, killed on drop; its output goes to `log`.
pub struct FreeDiameter {
    pub child: Child,
    pub log: PathBuf,
}

impl FreeDiameter {
    pub fn start(ns: &Netns, conf: &Path, log: PathBuf) -> FreeDiameter {
        let out = File::create(&log).expect("log file");
        let mut cmd = Command::new("freeDiameterd");
        cmd.arg("-c")
            .arg(conf)
            .arg("-d")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out);
        let child = ns
            .spawn(&mut cmd)
            .expect("spawn freeDiameterd (package freediameterd; `cargo xtask setup` installs it)");
        FreeDiameter { child, log }
    }

    pub fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for FreeDiameter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
