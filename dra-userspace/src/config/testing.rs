//! TOML snippets the crate's unit tests build their configs from: the agent's `[global]`,
//! client and server peers, and Gx CCR and peer rate limits. Each snippet starts with a
//! blank line and ends with a newline, so they concatenate into a config.

use std::fmt::Display;

/// `[global]` of the agent dra.lab.example (realm lab.example) with the lines `keys`
/// (each ending in a newline), then one listener on 198.18.1.1:3868.
pub fn global(keys: &str) -> String {
    format!(
        "\n[global]\norigin_host = \"dra.lab.example\"\norigin_realm = \"lab.example\"\n{keys}\n\
         [[listener]]\naddress = \"198.18.1.1:3868\"\n"
    )
}

/// A client `name` in realm lab.example (origin host `name`.lab.example) with its
/// `addresses` (no line if none), then the lines `keys`.
pub fn client(name: &str, addresses: &[&str], keys: &str) -> String {
    peer(name, "lab.example", addresses, "client", keys)
}

/// A server `name` in realm pcrf.lab.example (origin host `name`.pcrf.lab.example) with its
/// `addresses` (no line if none), then the lines `keys`.
pub fn server(name: &str, addresses: &[&str], keys: &str) -> String {
    peer(name, "pcrf.lab.example", addresses, "server", keys)
}

fn peer(name: &str, realm: &str, addresses: &[&str], role: &str, keys: &str) -> String {
    let addresses = if addresses.is_empty() {
        String::new()
    } else {
        format!("addresses = {addresses:?}\n")
    };
    format!(
        "\n[[peer]]\nname = \"{name}\"\norigin_host = \"{name}.{realm}\"\nrealm = \"{realm}\"\n\
         {addresses}role = \"{role}\"\n{keys}"
    )
}

/// An ingress `[[message_rate_limit_profile]]` of Gx CCR with `request_type` for `target`
/// (`peer = "…"` or `group = "…"`) at `rate`, then the lines `keys`.
pub fn gx_ccr_limit(target: &str, request_type: &str, rate: impl Display, keys: &str) -> String {
    format!(
        "\n[[message_rate_limit_profile]]\n{target}\ndirection = \"ingress\"\n\
         application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"{request_type}\"\n\
         rate = {rate}\n{keys}"
    )
}

/// A `[[peer_rate_limit_profile]]` for `target` (`peer = "…"` or `group = "…"`) in
/// `direction` at `rate`, then the lines `keys`.
pub fn peer_limit(target: &str, direction: &str, rate: impl Display, keys: &str) -> String {
    format!(
        "\n[[peer_rate_limit_profile]]\n{target}\ndirection = \"{direction}\"\n\
         rate = {rate}\n{keys}"
    )
}
