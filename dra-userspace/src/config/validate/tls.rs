//! `tls = { ... }` of a `[[listener]]` and of a `[[peer]]`: the files are read and
//! checked here, so `dra check-config` reports a missing, unreadable or unusable
//! certificate, key or CA at its `file:line:column`.
//!
//! - A listener: `cert`, `key`, `ca` (required), `handshake_timeout`.
//! - A peer the agent dials (`connect`): the same (the agent is the TLS client: its
//!   certificate towards that server, and the CA the server's must chain to), and
//!   `identity`.
//! - A peer that connects to the agent: `identity` and `handshake_timeout` only; it is
//!   accepted by a TLS listener, with that listener's files.

use std::time::Duration;

use super::Span;
use super::syntax::{absolute_path, identity, positive_duration};
use crate::config::error::Errors;
use crate::config::raw::{Item, RawTls, S};
use crate::config::{Tls, TlsFiles};
use crate::transport::tls::{self as t, Credentials, CredentialsError};

/// The longest handshake timeout accepted (a handshake is a few round trips).
const MAX_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the table belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// A `[[listener]]`.
    Listener,
    /// A `[[peer]]` with `connect`: the agent dials it.
    Dialled,
    /// A `[[peer]]` without `connect`: it connects to a TLS listener.
    Accepted,
}

/// A `tls` table, checked for its owner. `origin_host`: a peer's (its certificate's
/// default name).
pub(super) fn tls(
    e: &mut Errors<'_>,
    item: &Item<RawTls>,
    owner: Owner,
    origin_host: Option<&str>,
) -> Option<Tls> {
    let r = &item.v;
    let handshake_timeout = positive_duration(
        e,
        "handshake_timeout",
        &r.handshake_timeout,
        t::DEFAULT_HANDSHAKE_TIMEOUT,
    );
    if let Some(v) = &r.handshake_timeout
        && handshake_timeout > MAX_HANDSHAKE_TIMEOUT
    {
        e.at(&v.span(), "handshake_timeout must be at most 60s");
    }
    let identity = match (&r.identity, owner) {
        (Some(v), Owner::Listener) => {
            e.at(
                &v.span(),
                "identity is for a [[peer]]'s tls (the name its certificate must carry)",
            );
            None
        }
        (Some(v), _) => {
            let id = identity(e, "identity", v)?;
            dns_name(e, &v.span(), "identity", &id)?;
            Some(id)
        }
        (None, _) => {
            if let Some(h) = origin_host {
                dns_name(e, &item.span, "origin_host", h)?;
            }
            None
        }
    };
    let (files, credentials) = match owner {
        Owner::Accepted => {
            for (key, v) in [("cert", &r.cert), ("key", &r.key), ("ca", &r.ca)] {
                if let Some(v) = v {
                    e.at(
                        &v.span(),
                        format!(
                            "{key} is not for a peer that connects to the agent: its \
                             connections are accepted by a TLS [[listener]] with that \
                             listener's cert, key and ca"
                        ),
                    );
                }
            }
            (None, None)
        }
        Owner::Listener | Owner::Dialled => {
            let (files, credentials) = files(e, item)?;
            (Some(files), Some(credentials))
        }
    };
    Some(Tls {
        files,
        credentials,
        identity,
        handshake_timeout,
    })
}

/// The name is checked against certificates as a DNS name: it must be one.
fn dns_name(e: &mut Errors<'_>, span: &Span, key: &str, name: &str) -> Option<()> {
    if t::is_dns_name(name) {
        return Some(());
    }
    e.at(
        span,
        format!(
            "{key} \"{name}\" is not a DNS name, and a TLS peer's certificate names it as \
             one; set tls.identity to the DNS name its certificate carries"
        ),
    );
    None
}

/// `cert`, `key`, `ca`: each required, an absolute path, readable, and what it should
/// hold; then the key must match the certificate.
fn files(e: &mut Errors<'_>, item: &Item<RawTls>) -> Option<(TlsFiles, Credentials)> {
    let r = &item.v;
    let mut file = |key: &str, v: &Option<S<String>>| {
        let Some(v) = v else {
            e.at(
                &item.span,
                format!("missing key {key} in tls (cert, key and ca are required)"),
            );
            return None;
        };
        let path = absolute_path(e, key, v)?;
        match std::fs::read(&path) {
            Ok(bytes) => Some((path, bytes, v.span())),
            Err(err) => {
                e.at(
                    &v.span(),
                    format!("cannot read {key} {}: {err}", path.display()),
                );
                None
            }
        }
    };
    let cert = file("cert", &r.cert);
    let key = file("key", &r.key);
    let ca = file("ca", &r.ca);
    let chain = cert
        .as_ref()
        .and_then(|(p, b, s)| held(e, "cert", p, s, t::chain_from_pem(b)));
    let pkey = key
        .as_ref()
        .and_then(|(p, b, s)| held(e, "key", p, s, t::key_from_pem(b)));
    let roots = ca
        .as_ref()
        .and_then(|(p, b, s)| held(e, "ca", p, s, t::ca_from_pem(b)));
    let (chain, pkey, roots) = (chain?, pkey?, roots?);
    let (cert, key, ca) = (cert?, key?, ca?);
    match Credentials::new(chain, pkey, roots) {
        Ok(c) => Some((
            TlsFiles {
                cert: cert.0,
                key: key.0,
                ca: ca.0,
            },
            c,
        )),
        Err(err) => {
            e.at(
                &cert.2,
                format!(
                    "cert {} with key {}: {err}",
                    cert.0.display(),
                    key.0.display()
                ),
            );
            None
        }
    }
}

/// What a file holds, or its error at the file's span.
fn held<T>(
    e: &mut Errors<'_>,
    what: &str,
    path: &std::path::Path,
    span: &Span,
    r: Result<T, CredentialsError>,
) -> Option<T> {
    r.map_err(|err| e.at(span, format!("{what} {}: {err}", path.display())))
        .ok()
}
