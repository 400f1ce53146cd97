//! What freeDiameter needs from us to run beside the agent (the relay benchmark, the
//! interop test).

use std::{
    io,
    path::{Path, PathBuf},
    process::Command,
};

/// A self-signed certificate whose CN is `cn`, written by openssl as `dir/name.crt`
/// with its key `dir/name.key`; (certificate, key). freeDiameter loads TLS credentials
/// even when every peer is plain TCP, and checks that the CN matches its Identity.
pub fn self_signed_cert(dir: &Path, name: &str, cn: &str) -> io::Result<(PathBuf, PathBuf)> {
    let crt = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={cn}"))
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok((crt, key))
}
