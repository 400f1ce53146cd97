//! `prometheus` source: one value from a Prometheus instant query, over a minimal
//! HTTP/1.1 client on a plain TCP stream.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value;

use super::{CpuSource, SourceError, parse_number};

/// Largest HTTP response accepted (an instant query for one series is tiny).
const MAX_RESPONSE: u64 = 1 << 20;

/// The value of a PromQL expression, via `GET <base>/api/v1/query?query=<expr>`.
///
/// The query must evaluate to a scalar or to a vector with exactly one sample, already
/// in percent (e.g. `100 * (1 - avg(rate(node_cpu_seconds_total{instance="db1",
/// mode="idle"}[1m])))`); the value is returned as is. An empty vector (series gone), a
/// vector of several series, a matrix or string result, a non-finite value, an HTTP
/// status other than 200 and a Prometheus `"status":"error"` are errors.
///
/// Only `http://` base URLs are supported (no TLS; put Prometheus on a local or
/// otherwise trusted network, or behind a local proxy); the config check refuses the
/// others with the same reasons ([`PrometheusCpu::check_base_url`]). One connection per
/// query (`Connection: close`); bodies may be sent with `Content-Length`, chunked, or
/// until close.
#[derive(Debug, Clone)]
pub struct PrometheusCpu {
    base_url: String,
    authority: String,
    path_prefix: String,
    query: String,
    timeout: Duration,
}

impl PrometheusCpu {
    /// A source querying `base_url` (`http://host[:port][/prefix]`, port 80 by default)
    /// with `query`, with a 2 s connect/read/write timeout. The URL is refused as
    /// [`PrometheusCpu::check_base_url`] says.
    pub fn new(base_url: &str, query: impl Into<String>) -> Result<Self, SourceError> {
        let (authority, path_prefix) =
            split_base_url(base_url).map_err(|reason| SourceError::InvalidAddress {
                address: base_url.to_owned(),
                reason,
            })?;
        Ok(Self {
            base_url: base_url.to_owned(),
            authority,
            path_prefix,
            query: query.into(),
            timeout: Duration::from_secs(2),
        })
    }

    /// Whether [`PrometheusCpu::new`] accepts `base_url`, and why not: `https://` (no
    /// TLS here), another scheme, no host, user info, a query or a fragment. The config
    /// check asks this, so `dra check-config` accepts exactly the URLs `dra run` opens.
    pub fn check_base_url(base_url: &str) -> Result<(), &'static str> {
        split_base_url(base_url).map(|_| ())
    }

    /// Sets the connect, read and write timeout (each).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The request target, e.g. `/api/v1/query?query=up%7Bjob%3D%22db%22%7D`.
    fn target(&self) -> String {
        format!(
            "{}/api/v1/query?query={}",
            self.path_prefix,
            percent_encode(&self.query)
        )
    }

    fn fetch(&self, ctx: &str) -> Result<(u16, Vec<u8>), SourceError> {
        let io_err = |e| SourceError::io(ctx, e);
        let addrs = self.authority.to_socket_addrs().map_err(io_err)?;
        let mut last_err = io::Error::new(io::ErrorKind::NotFound, "address resolved to nothing");
        let mut stream = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, self.timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last_err = e,
            }
        }
        let mut stream = stream.ok_or_else(|| io_err(last_err))?;
        stream
            .set_read_timeout(Some(self.timeout))
            .map_err(io_err)?;
        stream
            .set_write_timeout(Some(self.timeout))
            .map_err(io_err)?;
        // RFC 9112 §3: request line; §3.2: Host is required in HTTP/1.1.
        let host = self
            .authority
            .strip_suffix(":80")
            .unwrap_or(&self.authority);
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: dra\r\nAccept: application/json\r\n\
             Connection: close\r\n\r\n",
            self.target()
        );
        stream.write_all(request.as_bytes()).map_err(io_err)?;
        let mut raw = Vec::new();
        stream
            .take(MAX_RESPONSE + 1)
            .read_to_end(&mut raw)
            .map_err(io_err)?;
        if raw.len() as u64 > MAX_RESPONSE {
            return Err(SourceError::malformed(ctx, "response larger than 1 MiB"));
        }
        parse_http_response(&raw).map_err(|detail| SourceError::malformed(ctx, detail))
    }
}

impl CpuSource for PrometheusCpu {
    fn sample(&mut self) -> Result<Option<f64>, SourceError> {
        let ctx = format!("{}: query {:?}", self.describe(), self.query);
        let (status, body) = self.fetch(&ctx)?;
        parse_query_response(&ctx, status, &body).map(Some)
    }

    fn describe(&self) -> String {
        format!("prometheus {}", self.base_url)
    }
}

/// Why an `https://` URL is refused.
const NO_TLS: &str = "https is not supported: this source speaks plain HTTP (no TLS); use \
                      http:// to a Prometheus on a trusted network or to a local \
                      TLS-terminating proxy";
/// Why a URL without `http://` or without a host is refused.
const NOT_HTTP: &str = "expected http://host:port";

/// `http://host[:port][/prefix]` → (`host:port`, port 80 by default; the prefix without
/// a trailing `/`). The error says why the URL cannot be used.
fn split_base_url(base_url: &str) -> Result<(String, String), &'static str> {
    let Some(rest) = base_url.strip_prefix("http://") else {
        return Err(if base_url.starts_with("https://") {
            NO_TLS
        } else {
            NOT_HTTP
        });
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(NOT_HTTP);
    }
    if authority.contains('@') {
        return Err("user info (user@host) is not supported");
    }
    if prefix.contains(['?', '#']) {
        return Err(
            "a query or fragment is not supported (the source sends its own \
                    /api/v1/query?query=...)",
        );
    }
    let has_port = match authority.rfind(']') {
        Some(i) => authority[i + 1..].starts_with(':'),
        None => authority.contains(':'),
    };
    let authority = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, prefix.trim_end_matches('/').to_owned()))
}

/// Splits a complete HTTP/1.1 response into status code and decoded body
/// (RFC 9112 §4 status line, §6 message body, §7.1 chunked coding).
fn parse_http_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let head_end = find(raw, b"\r\n\r\n").ok_or("response ends before the end of the headers")?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "headers are not UTF-8")?;
    let body = &raw[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1.x status line: {status_line:?}"));
    }
    let status: u16 = code
        .parse()
        .map_err(|_| format!("bad status code in {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("bad header line {line:?}"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .to_ascii_lowercase()
                .split(',')
                .any(|c| c.trim() == "chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("bad Content-Length {value:?}"))?,
            );
        }
    }
    let body = if chunked {
        decode_chunked(body)?
    } else if let Some(len) = length {
        body.get(..len)
            .ok_or("body shorter than Content-Length")?
            .to_vec()
    } else {
        body.to_vec() // until close
    };
    Ok((status, body))
}

/// RFC 9112 §7.1: `size-in-hex [;ext] CRLF data CRLF` … `0 CRLF [trailers] CRLF`.
fn decode_chunked(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = find(rest, b"\r\n").ok_or("truncated chunk size line")?;
        let line = std::str::from_utf8(&rest[..line_end]).map_err(|_| "chunk size is not ASCII")?;
        let size_hex = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_hex:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(out); // trailers ignored
        }
        let chunk = rest.get(..size).ok_or("truncated chunk")?;
        out.extend_from_slice(chunk);
        rest = rest
            .get(size..)
            .and_then(|r| r.strip_prefix(b"\r\n"))
            .ok_or("chunk not followed by CRLF")?;
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Percent-encodes everything except RFC 3986 §2.3 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Interprets a Prometheus HTTP API response (`/api/v1/query`): a scalar
/// `[<time>, "<value>"]` or a one-element vector `[{"metric":{…},"value":[<time>,"<value>"]}]`.
fn parse_query_response(ctx: &str, status: u16, body: &[u8]) -> Result<f64, SourceError> {
    let json: Result<Value, _> = serde_json::from_slice(body);
    if status != 200 {
        // Error bodies are JSON `{"status":"error","errorType":…,"error":…}` when they
        // come from Prometheus itself; a proxy may send anything.
        let detail = match json.as_ref().ok().and_then(api_error) {
            Some(e) => format!("HTTP {status}: {e}"),
            None => format!("HTTP {status}"),
        };
        return Err(SourceError::Remote {
            context: ctx.to_owned(),
            detail,
        });
    }
    let json = json.map_err(|source| SourceError::Json {
        context: ctx.to_owned(),
        source,
    })?;
    if let Some(e) = api_error(&json) {
        return Err(SourceError::Remote {
            context: ctx.to_owned(),
            detail: e,
        });
    }
    if json.get("status").and_then(Value::as_str) != Some("success") {
        return Err(SourceError::malformed(
            ctx,
            "response has no \"status\":\"success\"",
        ));
    }
    let data = json
        .get("data")
        .ok_or_else(|| SourceError::malformed(ctx, "no \"data\""))?;
    let kind = data
        .get("resultType")
        .and_then(Value::as_str)
        .unwrap_or("<missing>");
    let result = data.get("result");
    let pair = match kind {
        "scalar" => result,
        "vector" => {
            let series = result
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            match series {
                [one] => one.get("value"),
                [] => return Err(SourceError::malformed(ctx, "query returned no series")),
                many => {
                    return Err(SourceError::malformed(
                        ctx,
                        format!("query returned {} series, expected exactly one", many.len()),
                    ));
                }
            }
        }
        other => {
            return Err(SourceError::malformed(
                ctx,
                format!("result type {other:?}, expected a scalar or a one-element vector"),
            ));
        }
    };
    let value = pair
        .and_then(Value::as_array)
        .and_then(|p| p.get(1))
        .and_then(Value::as_str)
        .ok_or_else(|| SourceError::malformed(ctx, "sample is not [<time>, \"<value>\"]"))?;
    parse_number(ctx, value)
}

/// `"errorType: error"` of a `"status":"error"` body.
fn api_error(json: &Value) -> Option<String> {
    if json.get("status").and_then(Value::as_str) != Some("error") {
        return None;
    }
    let kind = json
        .get("errorType")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let msg = json.get("error").and_then(Value::as_str).unwrap_or("");
    Some(format!("{kind}: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_parsed_and_non_http_rejected() {
        let p = PrometheusCpu::new("http://127.0.0.1:9090", "up").unwrap();
        assert_eq!(
            (p.authority.as_str(), p.path_prefix.as_str()),
            ("127.0.0.1:9090", "")
        );
        assert_eq!(p.target(), "/api/v1/query?query=up");
        let p = PrometheusCpu::new("http://localhost/prom/", "a{b=\"c d\"}").unwrap();
        assert_eq!(p.authority, "localhost:80");
        assert_eq!(
            p.target(),
            "/prom/api/v1/query?query=a%7Bb%3D%22c%20d%22%7D"
        );
        let p = PrometheusCpu::new("http://[::1]:9090/", "up").unwrap();
        assert_eq!(p.authority, "[::1]:9090");
        assert_eq!(
            PrometheusCpu::new("http://[::1]", "up").unwrap().authority,
            "[::1]:80"
        );
        for (bad, why) in [
            ("https://x:9090", "https is not supported"),
            ("x:9090", "expected http://host:port"),
            ("ftp://x", "expected http://host:port"),
            ("http://", "expected http://host:port"),
            ("http:///prom", "expected http://host:port"),
            ("http://u@x/", "user info"),
            ("http://x/?q", "a query or fragment"),
            ("http://x/prom#f", "a query or fragment"),
        ] {
            let reason = match PrometheusCpu::new(bad, "up") {
                Err(SourceError::InvalidAddress { reason, .. }) => reason,
                other => panic!("{bad}: {other:?}"),
            };
            assert!(reason.starts_with(why), "{bad}: {reason}");
            assert_eq!(PrometheusCpu::check_base_url(bad), Err(reason), "{bad}");
        }
        assert_eq!(PrometheusCpu::check_base_url("http://x:9090/prom/"), Ok(()));
    }

    #[test]
    fn http_bodies_by_length_chunked_and_close() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA";
        assert_eq!(parse_http_response(r).unwrap(), (200, b"hello".to_vec()));
        let r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
                  4;x=y\r\nhell\r\n1\r\no\r\n0\r\n\r\n";
        assert_eq!(parse_http_response(r).unwrap(), (200, b"hello".to_vec()));
        let r = b"HTTP/1.0 503 Service Unavailable\r\nServer: x\r\n\r\ndown";
        assert_eq!(parse_http_response(r).unwrap(), (503, b"down".to_vec()));
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_http_response(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(
            parse_http_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
                .is_err()
        );
    }

    #[test]
    fn scalar_and_single_vector_results_give_the_value() {
        let scalar = br#"{"status":"success","data":{"resultType":"scalar",
            "result":[1700000000.1,"62.5"]}}"#;
        assert_eq!(parse_query_response("t", 200, scalar).unwrap(), 62.5);
        let vector = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"db1"},"value":[1700000000,"49"]}]}}"#;
        assert_eq!(parse_query_response("t", 200, vector).unwrap(), 49.0);
    }

    #[test]
    fn unusable_results_are_errors() {
        let cases: [(&str, u16, &[u8]); 7] = [
            (
                "empty",
                200,
                br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
            ),
            (
                "two series",
                200,
                br#"{"status":"success","data":{"resultType":"vector","result":[
                  {"metric":{},"value":[1,"1"]},{"metric":{},"value":[1,"2"]}]}}"#,
            ),
            (
                "matrix",
                200,
                br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
            ),
            (
                "nan",
                200,
                br#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#,
            ),
            ("not json", 200, b"<html>"),
            (
                "api error",
                400,
                br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#,
            ),
            ("proxy error", 502, b"Bad Gateway"),
        ];
        for (name, status, body) in cases {
            assert!(parse_query_response("t", status, body).is_err(), "{name}");
        }
        let e = parse_query_response("t", 400, cases[5].2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "t: server error: HTTP 400: bad_data: parse error"
        );
    }
}
