//! A throw-away certificate authority for TLS tests, the lab and the benchmarks:
//! everything is generated at run time (rcgen, ECDSA P-256) into a directory removed
//! on drop — no key is ever committed.
//!
//! Every certificate it issues carries its names both as DNS subject alternative names
//! (what the agent and rustls check) and the first as the subject's common name (what
//! freeDiameter checks against its Identity), and may serve as a TLS client and a TLS
//! server (both extended key usages): a Diameter node is either, connection by
//! connection.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// When an issued certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// From yesterday for 30 days.
    Current,
    /// Throughout 2020 only: expired.
    Expired,
}

/// The three files of one `tls = { cert, key, ca }` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
    /// The CA certificate the other side must chain to (PEM).
    pub ca: PathBuf,
}

impl TlsFiles {
    /// `tls = { cert = "...", key = "...", ca = "..." }` for a config file.
    pub fn toml(&self) -> String {
        format!(
            "{{ cert = \"{}\", key = \"{}\", ca = \"{}\" }}",
            self.cert.display(),
            self.key.display(),
            self.ca.display()
        )
    }

    /// The same certificate and key with another CA file (`ca`).
    pub fn trusting(&self, ca: &Path) -> TlsFiles {
        TlsFiles {
            ca: ca.to_path_buf(),
            ..self.clone()
        }
    }
}

/// A CA, its certificate in `dir/<name>-ca.crt`, and the certificates it issued.
pub struct TestCa {
    name: String,
    dir: PathBuf,
    own_dir: bool,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

fn rcgen_err(e: rcgen::Error) -> io::Error {
    io::Error::other(format!("rcgen: {e}"))
}

impl TestCa {
    /// A new CA named `name`, writing into a fresh directory under the system's
    /// temporary directory (removed when the CA is dropped).
    pub fn new(name: &str) -> io::Result<TestCa> {
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dra-pki-{}-{n}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut ca = TestCa::in_dir(name, &dir)?;
        ca.own_dir = true;
        Ok(ca)
    }

    /// A new CA named `name` writing into `dir` (left in place on drop).
    pub fn in_dir(name: &str, dir: &Path) -> io::Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err)?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("dra test CA {name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2099, 1, 1);
        let key = KeyPair::generate().map_err(rcgen_err)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(rcgen_err)?;
        let ca = TestCa {
            name: name.to_owned(),
            dir: dir.to_path_buf(),
            own_dir: false,
            issuer,
        };
        std::fs::write(ca.ca_path(), ca.issuer.pem())?;
        Ok(ca)
    }

    /// The CA certificate's file.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.crt", self.name))
    }

    /// Where the files are written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A current certificate for `names` (the first is also the common name), written
    /// as `<file>.crt` / `<file>.key`, with this CA as `ca`.
    pub fn issue(&self, file: &str, names: &[&str]) -> io::Result<TlsFiles> {
        self.issue_with(file, names, Validity::Current)
    }

    /// [`TestCa::issue`] with the given validity.
    pub fn issue_with(
        &self,
        file: &str,
        names: &[&str],
        validity: Validity,
    ) -> io::Result<TlsFiles> {
        let sans: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(sans).map_err(rcgen_err)?;
        if let Some(cn) = names.first() {
            params.distinguished_name.push(DnType::CommonName, *cn);
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let now = time::OffsetDateTime::now_utc();
        (params.not_before, params.not_after) = match validity {
            Validity::Current => (
                now - time::Duration::days(1),
                now + time::Duration::days(30),
            ),
            Validity::Expired => (
                rcgen::date_time_ymd(2020, 1, 1),
                rcgen::date_time_ymd(2020, 12, 31),
            ),
        };
        let key = KeyPair::generate().map_err(rcgen_err)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(rcgen_err)?;
        let files = TlsFiles {
            cert: self.dir.join(format!("{file}.crt")),
            key: self.dir.join(format!("{file}.key")),
            ca: self.ca_path(),
        };
        std::fs::write(&files.cert, cert.pem())?;
        write_secret(&files.key, key.serialize_pem().as_bytes())?;
        Ok(files)
    }
}

/// Writes a key readable by its owner only.
fn write_secret(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

impl Drop for TestCa {
    fn drop(&mut self) {
        if self.own_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
