//! The config as written: serde structs whose leaves keep their source spans.
//!
//! Each top-level table and each entry of an array of tables is deserialized on its
//! own, so a structural error (unknown key, wrong type, missing key) in one entry does
//! not hide the errors of the others. Leaves are kept as strings and numbers with
//! spans; `validate` turns them into the typed [`super::Config`].

use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::cpu_source::RawSource;
use super::error::Errors;

/// A deserialized table with the span of the table itself (for "missing key" errors):
/// for `[name]` / `[[name]]` tables that is the header.
pub(super) struct Item<T> {
    pub span: Range<usize>,
    pub v: T,
}

/// An array of inline tables whose rows were deserialized one by one, so a bad row
/// does not hide the errors of the others.
pub(super) struct List<T> {
    /// Span of the array value.
    pub span: Range<usize>,
    /// The rows that deserialized.
    pub items: Vec<Item<T>>,
    /// How many rows failed (their errors are already recorded).
    pub failed: usize,
}

/// A string name or an integer id (`application = "gx"` or `application = 16777238`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum NameOrNumber {
    Name(String),
    Number(i64),
}

impl<'de> Deserialize<'de> for NameOrNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NameOrNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a name (like \"gx\" or \"ccr\") or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NameOrNumber, E> {
                Ok(NameOrNumber::Name(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<NameOrNumber, E> {
                Ok(NameOrNumber::Number(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<NameOrNumber, E> {
                i64::try_from(v)
                    .map(NameOrNumber::Number)
                    .map_err(|_| E::custom("number too large"))
            }
        }
        d.deserialize_any(V)
    }
}

pub(super) type S<T> = Spanned<T>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGlobal {
    pub origin_host: S<String>,
    pub origin_realm: S<String>,
    pub product_name: Option<S<String>>,
    pub dynamic_rate_limiting: Option<S<bool>>,
    pub unknown_peer: Option<S<String>>,
    pub diameter_ports: Option<S<Vec<S<i64>>>>,
    pub watchdog: Option<S<String>>,
    pub startup_wait: Option<S<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFastPath {
    pub interface: Option<S<String>>,
    pub xdp_mode: Option<S<String>>,
    pub egress_interface: Option<S<String>>,
    pub fallback: Option<S<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOverload {
    pub enabled: Option<S<bool>>,
    pub target_delay: Option<S<String>>,
    pub answer_ratio: Option<S<f64>>,
    pub hold: Option<S<String>>,
    pub escalate: Option<S<String>>,
    pub levels: Option<S<Vec<S<i64>>>>,
    pub default_priority: Option<S<i64>>,
    pub priority: Option<S<std::collections::BTreeMap<S<String>, S<i64>>>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub address: Option<S<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSessionStore {
    pub kind: Option<S<String>>,
    pub addresses: Option<Vec<S<String>>>,
    pub ttl: Option<S<String>>,
    pub timeout: Option<S<String>>,
    pub key_prefix: Option<S<String>>,
    pub write: Option<S<String>>,
    pub on_error: Option<S<String>>,
    pub result_code: Option<S<i64>>,
    pub error_message: Option<S<String>>,
    pub cache_capacity: Option<S<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawControl {
    pub socket: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawListener {
    pub address: S<String>,
    pub transport: Option<S<String>>,
    pub multihome: Option<S<Vec<S<String>>>>,
    /// Deserialized on its own (see [`RawTls`]); `None` = key absent, `Some(None)` =
    /// it failed.
    #[serde(skip)]
    pub tls: Option<Option<Item<RawTls>>>,
}

/// `tls = { ... }` of a listener or a peer.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub cert: Option<S<String>>,
    pub key: Option<S<String>>,
    pub ca: Option<S<String>>,
    pub identity: Option<S<String>>,
    pub handshake_timeout: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPeer {
    pub name: S<String>,
    pub origin_host: S<String>,
    pub realm: S<String>,
    pub addresses: Option<Vec<S<String>>>,
    pub role: S<String>,
    pub group: Option<S<String>>,
    pub connect: Option<S<String>>,
    pub weight: Option<S<i64>>,
    pub connection_rate: Option<S<f64>>,
    pub connection_burst: Option<S<i64>>,
    pub doic: Option<S<bool>>,
    pub doic_algorithms: Option<S<Vec<S<String>>>>,
    pub doic_validity: Option<S<String>>,
    pub transport: Option<S<String>>,
    /// As [`RawListener::tls`].
    #[serde(skip)]
    pub tls: Option<Option<Item<RawTls>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPeerGroup {
    pub name: S<String>,
    pub answer_timeout: Option<S<String>>,
    pub delay_tolerance: Option<S<String>>,
    pub queue_limit: Option<S<i64>>,
    pub max_outstanding: Option<S<i64>>,
    pub selection: Option<S<String>>,
}

/// Both `[[peer_rate_limit_profile]]` and `[[message_rate_limit_profile]]`; the
/// class keys are checked per table by `validate`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRateLimit {
    pub peer: Option<S<String>>,
    pub group: Option<S<String>>,
    pub direction: S<String>,
    pub rate: S<f64>,
    pub burst: Option<S<i64>>,
    pub host_share: Option<S<i64>>,
    pub action: Option<S<String>>,
    pub result_code: Option<S<i64>>,
    pub error_message: Option<S<String>>,
    pub application: Option<S<NameOrNumber>>,
    pub command: Option<S<NameOrNumber>>,
    pub request_type: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClass {
    pub application: S<NameOrNumber>,
    pub command: S<NameOrNumber>,
    pub request_type: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDynamicProfile {
    pub peer: Option<S<String>>,
    pub group: Option<S<String>>,
    /// Rows are deserialized one by one (see [`List`]); `None` = key absent.
    #[serde(skip)]
    pub classes: Option<List<RawClass>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawThreshold {
    pub cpu: S<i64>,
    pub throttle: S<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDbCpuProfile {
    /// Rows are deserialized one by one (see [`List`]); `None` = key absent.
    #[serde(skip)]
    pub thresholds: Option<List<RawThreshold>>,
    pub reversal_hold_time: Option<S<String>>,
    pub reversal_step: Option<S<i64>>,
    pub sample_period: Option<S<String>>,
    pub ewma_alpha: Option<S<f64>>,
    pub missing_after: Option<S<i64>>,
    pub on_missing: Option<S<String>>,
    /// Deserialized on its own (its keys: `cpu_source.rs`); `None` = key absent,
    /// `Some(None)` = it failed.
    #[serde(skip)]
    pub source: Option<Option<Item<RawSource>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    pub realm: S<String>,
    pub application: Option<S<NameOrNumber>>,
    pub peer: Option<S<String>>,
    pub group: Option<S<String>>,
    pub weight: Option<S<i64>>,
}

/// The whole file as written.
#[derive(Default)]
pub(super) struct RawConfig {
    /// Span of the whole document (for errors about missing tables).
    pub doc_span: Range<usize>,
    pub global: Option<Item<RawGlobal>>,
    /// True when `[global]` exists but failed to deserialize.
    pub global_failed: bool,
    pub fast_path: Option<Item<RawFastPath>>,
    pub metrics: Option<Item<RawMetrics>>,
    pub control: Option<Item<RawControl>>,
    pub overload: Option<Item<RawOverload>>,
    pub session_store: Option<Item<RawSessionStore>>,
    pub listeners: Vec<Item<RawListener>>,
    pub peers: Vec<Item<RawPeer>>,
    pub peer_groups: Vec<Item<RawPeerGroup>>,
    pub peer_rate_limits: Vec<Item<RawRateLimit>>,
    pub message_rate_limits: Vec<Item<RawRateLimit>>,
    pub dynamic_profiles: Vec<Item<RawDynamicProfile>>,
    pub db_cpu_profile: Option<Item<RawDbCpuProfile>>,
    /// True when `[dynamic_throttling_db_cpu_profile]` exists but failed.
    pub db_cpu_profile_failed: bool,
    pub routes: Vec<Item<RawRoute>>,
    /// `[[peer]]` entries that failed to deserialize.
    pub peers_failed: usize,
    /// `[[message_rate_limit_profile]]` entries that failed to deserialize.
    pub message_limits_failed: usize,
    /// The `name` of every `[[peer]]` / `[[peer_group]]` entry, also of entries that
    /// failed to deserialize (so references to them cause no follow-on errors).
    pub peer_names: Vec<String>,
    pub group_names: Vec<String>,
}

/// Top-level tables (`[name]`) and arrays of tables (`[[name]]`).
pub(super) const TABLES: &[&str] = &[
    "global",
    "fast_path",
    "metrics",
    "control",
    "overload",
    "session_store",
    "dynamic_throttling_db_cpu_profile",
];
pub(super) const ARRAYS: &[&str] = &[
    "listener",
    "peer",
    "peer_group",
    "peer_rate_limit_profile",
    "message_rate_limit_profile",
    "dynamic_peer_rate_limit_profile",
    "route",
];

/// Field names of a `#[derive(Deserialize)]` struct: serde hands them to
/// `deserialize_struct`, which this deserializer records and then refuses.
pub(super) fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("probe"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// Edit distance, for "did you mean" hints.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Reports every key of `table` that is not in `fields` and removes it, so the
/// deserializer only sees known keys (and every typo is reported, not just the first).
fn check_keys(table: &mut DeTable<'_>, fields: &[&str], label: &str, errors: &mut Errors<'_>) {
    let unknown: Vec<(String, Range<usize>)> = table
        .keys()
        .filter(|k| !fields.contains(&k.get_ref().as_ref()))
        .map(|k| (k.get_ref().to_string(), k.span()))
        .collect();
    for (k, span) in unknown {
        let hint = match fields.iter().min_by_key(|f| distance(&k, f)) {
            Some(f) if distance(&k, f) <= 2.max(k.len() / 3) => format!("did you mean `{f}`?"),
            _ => format!(
                "expected one of {}",
                fields
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        errors.at(&span, format!("unknown key `{k}` in {label}; {hint}"));
        table.remove(k.as_str());
    }
}

/// serde's wording, in TOML terms.
fn toml_words(message: &str, label: &str) -> String {
    let m = message
        .replace("expected f64", "expected a number")
        .replace("expected i64", "expected an integer")
        .replace("unknown field", "unknown key");
    match m.strip_prefix("missing field ") {
        Some(key) => format!("missing key {key} in {label}"),
        None => m,
    }
}

/// Deserializes one table (checking its keys first). The span of a `[name]` /
/// `[[name]]` table is its header, so "missing key" errors point there.
fn one<'i, T: Deserialize<'i>>(
    value: Spanned<DeValue<'i>>,
    label: &str,
    errors: &mut Errors<'_>,
) -> Option<Item<T>> {
    let span = value.span();
    let mut inner = value.into_inner();
    if let DeValue::Table(t) = &mut inner {
        check_keys(t, fields_of::<T>(), label, errors);
    }
    match T::deserialize(ValueDeserializer::from(Spanned::new(span.clone(), inner))) {
        Ok(v) => Some(Item { span, v }),
        Err(e) => {
            errors.at(
                &e.span().unwrap_or(span),
                toml_words(e.message().trim_end(), label),
            );
            None
        }
    }
}

fn table<'i, T: Deserialize<'i>>(
    key: &str,
    value: Spanned<DeValue<'i>>,
    errors: &mut Errors<'_>,
) -> (Option<Item<T>>, bool) {
    if !value.get_ref().is_table() {
        errors.at(
            &value.span(),
            format!("`{key}` must be a table: write [{key}]"),
        );
        return (None, true);
    }
    let item = one(value, &format!("[{key}]"), errors);
    let failed = item.is_none();
    (item, failed)
}

fn name_in(value: &DeValue<'_>) -> Option<String> {
    let name = value.as_table()?.get("name")?;
    Some(name.get_ref().as_str()?.to_string())
}

/// Removes `key` from a table value.
fn take<'i>(value: &mut Spanned<DeValue<'i>>, key: &str) -> Option<Spanned<DeValue<'i>>> {
    match value.get_mut() {
        DeValue::Table(t) => t.remove(key),
        _ => None,
    }
}

/// An array of inline tables, each row deserialized on its own.
fn list<'i, T: Deserialize<'i>>(
    value: Spanned<DeValue<'i>>,
    key: &str,
    row_label: &str,
    errors: &mut Errors<'_>,
) -> List<T> {
    let span = value.span();
    let mut out = List {
        span: span.clone(),
        items: Vec::new(),
        failed: 0,
    };
    let DeValue::Array(rows) = value.into_inner() else {
        errors.at(
            &span,
            format!("{key} must be an array of inline tables like [{{ ... }}, {{ ... }}]"),
        );
        out.failed = 1;
        return out;
    };
    for row in rows {
        if !row.get_ref().is_table() {
            errors.at(
                &row.span(),
                format!("each {row_label} must be an inline table {{ ... }}"),
            );
            out.failed += 1;
            continue;
        }
        match one(row, row_label, errors) {
            Some(item) => out.items.push(item),
            None => out.failed += 1,
        }
    }
    out
}

/// What `array`'s `prepare` returns: puts the keys it took out of an entry back into the
/// deserialized entry.
type Finish<'i, T> = Box<dyn FnOnce(&mut T) + 'i>;

fn array<'i, T: Deserialize<'i>>(
    key: &str,
    value: Spanned<DeValue<'i>>,
    errors: &mut Errors<'_>,
    names: Option<&mut Vec<String>>,
    mut prepare: impl FnMut(&mut Spanned<DeValue<'i>>, &mut Errors<'_>) -> Finish<'i, T>,
) -> (Vec<Item<T>>, usize) {
    let span = value.span();
    let DeValue::Array(entries) = value.into_inner() else {
        errors.at(
            &span,
            format!("`{key}` must be an array of tables: write [[{key}]]"),
        );
        return (Vec::new(), 1);
    };
    let label = format!("[[{key}]]");
    let mut out = Vec::new();
    let mut failed = 0;
    let mut names = names;
    for mut entry in entries {
        if !entry.get_ref().is_table() {
            errors.at(
                &entry.span(),
                format!("each `{key}` entry must be a table: write [[{key}]]"),
            );
            failed += 1;
            continue;
        }
        if let (Some(names), Some(seen)) = (names.as_deref_mut(), name_in(entry.get_ref())) {
            names.push(seen);
        }
        let finish = prepare(&mut entry, errors);
        match one::<T>(entry, &label, errors) {
            Some(mut item) => {
                finish(&mut item.v);
                out.push(item);
            }
            None => failed += 1,
        }
    }
    (out, failed)
}

fn nothing<'i, T>(_: &mut Spanned<DeValue<'i>>, _: &mut Errors<'_>) -> Finish<'i, T> {
    Box::new(|_| {})
}

/// Takes an entry's `tls` inline table out, to deserialize it on its own.
fn tls_of(
    entry: &mut Spanned<DeValue<'_>>,
    errors: &mut Errors<'_>,
) -> Option<Option<Item<RawTls>>> {
    take(entry, "tls").map(|v| {
        if v.get_ref().is_table() {
            one(v, "tls", errors)
        } else {
            errors.at(
                &v.span(),
                "tls must be a table like { cert = \"/etc/dra/tls/dra.crt\", \
                 key = \"/etc/dra/tls/dra.key\", ca = \"/etc/dra/tls/ca.crt\" }",
            );
            None
        }
    })
}

impl RawConfig {
    /// Splits the parsed document into its tables, deserializing each on its own.
    pub(super) fn from_document(doc: Spanned<DeTable<'_>>, errors: &mut Errors<'_>) -> RawConfig {
        let mut raw = RawConfig {
            doc_span: doc.span(),
            ..RawConfig::default()
        };
        for (key, value) in doc.into_inner() {
            let k: &str = key.get_ref();
            match k {
                "global" => {
                    (raw.global, raw.global_failed) = table(k, value, errors);
                }
                "fast_path" => raw.fast_path = table(k, value, errors).0,
                "metrics" => raw.metrics = table(k, value, errors).0,
                "control" => raw.control = table(k, value, errors).0,
                "overload" => raw.overload = table(k, value, errors).0,
                "session_store" => raw.session_store = table(k, value, errors).0,
                "dynamic_throttling_db_cpu_profile" => {
                    let mut value = value;
                    let thresholds = take(&mut value, "thresholds")
                        .map(|v| list(v, "thresholds", "thresholds row", errors));
                    let source = take(&mut value, "source").map(|v| {
                        if v.get_ref().is_table() {
                            one(v, "source", errors)
                        } else {
                            errors.at(
                                &v.span(),
                                "source must be a table like { kind = \"redis\", \
                                 address = \"127.0.0.1:6379\" }",
                            );
                            None
                        }
                    });
                    (raw.db_cpu_profile, raw.db_cpu_profile_failed) = table(k, value, errors);
                    if let Some(p) = &mut raw.db_cpu_profile {
                        p.v.thresholds = thresholds;
                        p.v.source = source;
                    }
                }
                "listener" => {
                    raw.listeners = array(k, value, errors, None, |entry, errors| {
                        let tls = tls_of(entry, errors);
                        Box::new(move |l: &mut RawListener| l.tls = tls)
                    })
                    .0
                }
                "peer" => {
                    (raw.peers, raw.peers_failed) = array(
                        k,
                        value,
                        errors,
                        Some(&mut raw.peer_names),
                        |entry, errors| {
                            let tls = tls_of(entry, errors);
                            Box::new(move |p: &mut RawPeer| p.tls = tls)
                        },
                    )
                }
                "peer_group" => {
                    raw.peer_groups = array(k, value, errors, Some(&mut raw.group_names), nothing).0
                }
                "peer_rate_limit_profile" => {
                    raw.peer_rate_limits = array(k, value, errors, None, nothing).0
                }
                "message_rate_limit_profile" => {
                    (raw.message_rate_limits, raw.message_limits_failed) =
                        array(k, value, errors, None, nothing)
                }
                "dynamic_peer_rate_limit_profile" => {
                    raw.dynamic_profiles = array(k, value, errors, None, |entry, errors| {
                        let classes = take(entry, "classes")
                            .map(|v| list::<RawClass>(v, "classes", "classes entry", errors));
                        Box::new(move |p: &mut RawDynamicProfile| p.classes = classes)
                    })
                    .0
                }
                "route" => raw.routes = array(k, value, errors, None, nothing).0,
                other if !value.get_ref().is_table() && !value.get_ref().is_array() => {
                    errors.at(
                        &key.span(),
                        format!(
                            "unknown top-level key `{other}`: keys belong in a table such as \
                             [global]"
                        ),
                    );
                }
                other => {
                    let mut expected: Vec<String> =
                        TABLES.iter().map(|t| format!("[{t}]")).collect();
                    expected.extend(ARRAYS.iter().map(|t| format!("[[{t}]]")));
                    errors.at(
                        &key.span(),
                        format!(
                            "unknown table `{other}`, expected one of {}",
                            expected.join(", ")
                        ),
                    );
                }
            }
        }
        raw
    }
}
