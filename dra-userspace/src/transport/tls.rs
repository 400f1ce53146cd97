//! TLS over TCP (RFC 6733 §13.1), with rustls (ring provider; TLS 1.2 and 1.3) and
//! mutual authentication: both sides present a certificate chain, and each checks the
//! other's against its configured CA.
//!
//! - **From the first byte** (RFC 6733 §5.6.1 "TLS/TCP ... the TLS handshake begins
//!   when the connection is established"): a TLS listener or a TLS peer speaks
//!   nothing but TLS; there is no in-band upgrade after CER/CEA (RFC 3588's
//!   Inband-Security-Id, which RFC 6733 §13.1 keeps for backward compatibility only).
//! - **The peer's identity**: dialling a server, the server's certificate must chain
//!   to the peer's `ca` and carry its name (the peer's `identity`, else its
//!   Origin-Host) as a DNS subject alternative name — rustls checks it during the
//!   handshake ([`Credentials::connector`]). Accepting, the client's certificate must
//!   chain to the listener's `ca` ([`Credentials::acceptor`]); which configured peers
//!   it names is decided by the agent with [`names`] before any Diameter byte is read,
//!   and its CER's Origin-Host must be one of them.
//! - Why a handshake failed, for the log line and the counter: [`Refusal`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{CertificateError, ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;

use super::Connection;

/// IANA's port of Diameter over TLS/TCP and DTLS/SCTP ("diameters"). RFC 6733 §2.1 and
/// §11.4 print 5658; its verified erratum 3997 corrects that to 5868, the port IANA
/// registered (freeDiameter's default too).
pub const DIAMETERS_PORT: u16 = 5868;

/// Default bound on a TLS handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// One side's TLS material: its certificate chain and key, and the CA the other
/// side's certificate must chain to. Compared by content (a reload that rewrote the
/// files at the same paths is a change); the key is never printed.
#[derive(Clone)]
pub struct Credentials {
    chain: Vec<CertificateDer<'static>>,
    key: Arc<PrivateKeyDer<'static>>,
    roots: Vec<CertificateDer<'static>>,
}

impl PartialEq for Credentials {
    fn eq(&self, o: &Credentials) -> bool {
        self.chain == o.chain
            && self.roots == o.roots
            && self.key.secret_der() == o.key.secret_der()
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("chain", &self.chain.len())
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

/// Why TLS material could not be used (a config error at the offending path).
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The certificate file holds no PEM certificate.
    #[error("no PEM certificate (-----BEGIN CERTIFICATE-----) in it")]
    NoCertificate,
    /// The key file holds no PEM private key.
    #[error("no PEM private key (PKCS#8, PKCS#1 or SEC1) in it")]
    NoKey,
    /// A PEM section could not be decoded.
    #[error("not valid PEM: {0}")]
    Pem(String),
    /// A CA certificate is not a usable trust anchor.
    #[error("not a usable CA certificate: {0}")]
    Ca(#[source] rustls::Error),
    /// rustls refused the certificate and key (a key that does not match the
    /// certificate, an unsupported key type).
    #[error("{0}")]
    Rejected(#[source] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

const VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

impl Credentials {
    /// The material of one `tls = { ... }` table, checked: rustls builds both a server
    /// and a client config from it (the key matches the certificate and is of a
    /// supported type), so a config that passed `dra check-config` can be used.
    pub fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        roots: Vec<CertificateDer<'static>>,
    ) -> Result<Credentials, CredentialsError> {
        let c = Credentials {
            chain,
            key: Arc::new(key),
            roots,
        };
        c.check()?;
        Ok(c)
    }

    /// [`Credentials::new`] from PEM text: the certificate chain (end entity first),
    /// the key, the CA certificates.
    pub fn from_pem(cert: &[u8], key: &[u8], ca: &[u8]) -> Result<Credentials, CredentialsError> {
        Credentials::new(chain_from_pem(cert)?, key_from_pem(key)?, ca_from_pem(ca)?)
    }

    /// Builds both configs once: the key matches the certificate, rustls supports it.
    fn check(&self) -> Result<(), CredentialsError> {
        self.server_config()?;
        ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(VERSIONS)
            .map_err(CredentialsError::Rejected)?
            .with_root_certificates(trust_anchors(&self.roots)?)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(CredentialsError::Rejected)?;
        Ok(())
    }

    fn server_config(&self) -> Result<ServerConfig, CredentialsError> {
        let p = provider();
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(trust_anchors(&self.roots)?),
            p.clone(),
        )
        .build()
        .map_err(|e| CredentialsError::Ca(rustls::Error::General(e.to_string())))?;
        ServerConfig::builder_with_provider(p)
            .with_protocol_versions(VERSIONS)
            .map_err(CredentialsError::Rejected)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(CredentialsError::Rejected)
    }

    /// The accepting side: presents our chain, requires a client certificate that
    /// chains to the CA.
    pub fn acceptor(&self) -> Acceptor {
        let cfg = self.server_config().expect("checked in from_pem");
        Acceptor(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
    }

    /// The dialling side towards a server that must be `name` (a DNS name in its
    /// certificate): presents our chain, checks the server's against the CA and the
    /// name. `None` if `name` is not a DNS name.
    pub fn connector(&self, name: &str) -> Option<Connector> {
        let server_name = ServerName::try_from(name.to_owned()).ok()?;
        let p = provider();
        let verifier = WebPkiServerVerifier::builder_with_provider(
            Arc::new(trust_anchors(&self.roots).expect("checked in from_pem")),
            p.clone(),
        )
        .build()
        .expect("checked in from_pem");
        let cfg = ClientConfig::builder_with_provider(p)
            .with_protocol_versions(VERSIONS)
            .expect("checked in from_pem")
            .with_webpki_verifier(verifier)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .expect("checked in from_pem");
        Some(Connector {
            inner: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
            name: server_name,
        })
    }
}

/// The certificates of a PEM file (a chain, end entity first).
pub fn chain_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, CredentialsError> {
    certificates(pem)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn key_from_pem(pem: &[u8]) -> Result<PrivateKeyDer<'static>, CredentialsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => CredentialsError::NoKey,
        e => CredentialsError::Pem(e.to_string()),
    })
}

/// The CA certificates of a PEM file, each checked as a trust anchor.
pub fn ca_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, CredentialsError> {
    let roots = certificates(pem)?;
    trust_anchors(&roots)?;
    Ok(roots)
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, CredentialsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CredentialsError::Pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(CredentialsError::NoCertificate);
    }
    Ok(certs)
}

fn trust_anchors(certs: &[CertificateDer<'static>]) -> Result<RootCertStore, CredentialsError> {
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots.add(c.clone()).map_err(CredentialsError::Ca)?;
    }
    Ok(roots)
}

/// Accepts TLS connections (the agent's TLS listeners, dra-loadgen's TLS servers).
#[derive(Clone)]
pub struct Acceptor(tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// Dials TLS connections to one server name.
#[derive(Clone)]
pub struct Connector {
    inner: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Connector").field(&self.name).finish()
    }
}

impl Acceptor {
    /// The TLS handshake on an accepted TCP connection, bounded by `timeout`.
    pub async fn accept(&self, tcp: TcpStream, timeout: Duration) -> Result<Connection, Refusal> {
        let (remote, local) = addresses(&tcp)?;
        let s = tokio::time::timeout(timeout, self.0.accept(tcp))
            .await
            .map_err(|_| Refusal::Timeout)?
            .map_err(|e| Refusal::of(&e))?;
        let info = TlsInfo::of(s.get_ref().1);
        let stream = tokio_rustls::TlsStream::Server(s);
        Ok(Connection::tls(remote, local, stream, info))
    }
}

impl Connector {
    /// The TLS handshake on a dialled TCP connection, bounded by `timeout`.
    pub async fn connect(&self, tcp: TcpStream, timeout: Duration) -> Result<Connection, Refusal> {
        let (remote, local) = addresses(&tcp)?;
        let s = tokio::time::timeout(timeout, self.inner.connect(self.name.clone(), tcp))
            .await
            .map_err(|_| Refusal::Timeout)?
            .map_err(|e| Refusal::of(&e))?;
        let info = TlsInfo::of(s.get_ref().1);
        let stream = tokio_rustls::TlsStream::Client(s);
        Ok(Connection::tls(remote, local, stream, info))
    }
}

fn addresses(tcp: &TcpStream) -> Result<(std::net::SocketAddr, std::net::SocketAddr), Refusal> {
    let _ = tcp.set_nodelay(true);
    match (tcp.peer_addr(), tcp.local_addr()) {
        (Ok(r), Ok(l)) => Ok((r, l)),
        (Err(e), _) | (_, Err(e)) => Err(Refusal::Io(e.kind())),
    }
}

/// What the handshake established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsInfo {
    /// "TLSv1.3", "TLSv1.2".
    pub version: &'static str,
    /// The peer's end-entity certificate (always present: both sides require one).
    pub peer_certificate: Option<CertificateDer<'static>>,
}

impl TlsInfo {
    fn of<D>(c: &rustls::ConnectionCommon<D>) -> TlsInfo {
        let version = match c.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            _ => "TLS",
        };
        TlsInfo {
            version,
            peer_certificate: c
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.clone().into_owned()),
        }
    }
}

/// Which of `names` (DNS names: peers' identities or Origin-Hosts) the certificate is
/// valid for, by index (RFC 6125 matching of its DNS subject alternative names; the
/// subject's common name is not looked at). Empty when it names none, or does not
/// parse.
pub fn names<'a>(
    cert: &CertificateDer<'_>,
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<usize> {
    let Ok(parsed) = ParsedCertificate::try_from(cert) else {
        return Vec::new();
    };
    names
        .into_iter()
        .enumerate()
        .filter(|(_, n)| {
            ServerName::try_from(*n)
                .is_ok_and(|sn| rustls::client::verify_server_name(&parsed, &sn).is_ok())
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether `name` can be checked against a certificate (a DNS name).
pub fn is_dns_name(name: &str) -> bool {
    matches!(ServerName::try_from(name), Ok(ServerName::DnsName(_)))
}

/// Why a TLS connection was refused: the label of `dra_tls_refused_total{reason}` and
/// the log line's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The peer's certificate does not chain to the configured CA.
    UnknownCa,
    /// The peer's certificate (or one of its chain) has expired.
    Expired,
    /// The peer's certificate is not valid yet.
    NotYetValid,
    /// The peer's certificate does not name the peer (dialling: the server name;
    /// accepting: no TLS peer — or not the peer whose address it comes from).
    NotForPeer,
    /// The peer presented no certificate.
    NoCertificate,
    /// Any other certificate problem (bad signature, wrong usage, unparsable).
    BadCertificate,
    /// The peer refused ours (a TLS alert it sent).
    PeerRefused,
    /// The handshake did not complete in time.
    Timeout,
    /// A peer configured for TLS sent its CER over plain TCP.
    PlainTcp,
    /// The CER's Origin-Host is not a name the peer's certificate was accepted for.
    CerIdentity,
    /// Any other handshake failure (not TLS, no common version or cipher suite).
    Handshake,
    /// The socket failed during the handshake.
    Io(io::ErrorKind),
}

impl Refusal {
    /// The counter label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::UnknownCa => "unknown_ca",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::NotForPeer => "not_for_peer",
            Refusal::NoCertificate => "no_certificate",
            Refusal::BadCertificate => "bad_certificate",
            Refusal::PeerRefused => "peer_refused",
            Refusal::Timeout => "handshake_timeout",
            Refusal::PlainTcp => "plain_tcp",
            Refusal::CerIdentity => "cer_identity",
            Refusal::Handshake => "handshake",
            Refusal::Io(_) => "io",
        }
    }

    /// Every label, for metrics that start at zero.
    pub const LABELS: [&'static str; 12] = [
        "unknown_ca",
        "expired",
        "not_yet_valid",
        "not_for_peer",
        "no_certificate",
        "bad_certificate",
        "peer_refused",
        "handshake_timeout",
        "plain_tcp",
        "cer_identity",
        "handshake",
        "io",
    ];

    /// The reason of a failed tokio-rustls handshake.
    pub fn of(e: &io::Error) -> Refusal {
        let Some(tls) = e.get_ref().and_then(|x| x.downcast_ref::<rustls::Error>()) else {
            return Refusal::Io(e.kind());
        };
        match tls {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer => Refusal::UnknownCa,
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    Refusal::Expired
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    Refusal::NotYetValid
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => Refusal::NotForPeer,
                _ => Refusal::BadCertificate,
            },
            rustls::Error::NoCertificatesPresented => Refusal::NoCertificate,
            rustls::Error::AlertReceived(_) => Refusal::PeerRefused,
            _ => Refusal::Handshake,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Refusal::UnknownCa => "its certificate does not chain to the configured CA",
            Refusal::Expired => "its certificate has expired",
            Refusal::NotYetValid => "its certificate is not valid yet",
            Refusal::NotForPeer => "its certificate does not name the peer",
            Refusal::NoCertificate => "it presented no certificate",
            Refusal::BadCertificate => "its certificate is not acceptable",
            Refusal::PeerRefused => "it refused our certificate (TLS alert)",
            Refusal::Timeout => "the TLS handshake did not complete in time",
            Refusal::PlainTcp => "a TLS peer sent its CER over plain TCP",
            Refusal::CerIdentity => "its CER's Origin-Host is not a name its certificate has",
            Refusal::Handshake => "the TLS handshake failed",
            Refusal::Io(_) => "the connection failed during the TLS handshake",
        };
        f.write_str(text)
    }
}
