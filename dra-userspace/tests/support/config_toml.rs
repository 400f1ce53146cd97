//! [`ConfigToml`]: the text of a `dra` config the way the tests write it.

/// A `dra` config: the DRA's identity and listeners, then peers, groups, routes and
/// limits in the order they are added (`[[peer]]` order is the order of the peers in
/// the plan). Peers are named `<name>`, Origin-Host `<name>.<realm>`.
#[derive(Clone, Debug)]
pub struct ConfigToml(String);

impl ConfigToml {
    /// Origin-Host `dra.<realm>` in `realm`, one `[[listener]]` per address (with port)
    /// in `listeners`; `global`: more `[global]` keys, one per line ("" for none).
    pub fn new(realm: &str, listeners: &[&str], global: &str) -> ConfigToml {
        let mut t =
            format!("[global]\norigin_host = \"dra.{realm}\"\norigin_realm = \"{realm}\"\n");
        t.push_str(global);
        if !global.is_empty() && !global.ends_with('\n') {
            t.push('\n');
        }
        for l in listeners {
            t.push_str(&format!("\n[[listener]]\naddress = \"{l}\"\n"));
        }
        ConfigToml(t)
    }

    /// Client peer `name` in `realm`, at `addresses`, with more `keys` ("" for none).
    pub fn client(self, name: &str, realm: &str, addresses: &[&str], keys: &str) -> ConfigToml {
        let addresses: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
        self.with(&format!(
            "[[peer]]\nname = \"{name}\"\norigin_host = \"{name}.{realm}\"\nrealm = \"{realm}\"\n\
             addresses = [{}]\nrole = \"client\"\n{keys}",
            addresses.join(", ")
        ))
    }

    /// Server peer `name` in `realm` that the agent connects to at `connect`, with more
    /// `keys` (`group`, `addresses`…; "" for none).
    pub fn server(self, name: &str, realm: &str, connect: &str, keys: &str) -> ConfigToml {
        self.with(&format!(
            "[[peer]]\nname = \"{name}\"\norigin_host = \"{name}.{realm}\"\nrealm = \"{realm}\"\n\
             role = \"server\"\nconnect = \"{connect}\"\n{keys}"
        ))
    }

    /// `[[peer_group]]` `name` with more `keys` ("" for none).
    pub fn group(self, name: &str, keys: &str) -> ConfigToml {
        self.with(&format!("[[peer_group]]\nname = \"{name}\"\n{keys}"))
    }

    /// `[[route]]` for `realm` with `keys` (`peer` or `group`, `application`).
    pub fn route(self, realm: &str, keys: &str) -> ConfigToml {
        self.with(&format!("[[route]]\nrealm = \"{realm}\"\n{keys}"))
    }

    /// `[control] socket = path`: where `dra status` (and a test's readiness wait)
    /// reaches the agent.
    pub fn control(self, path: &std::path::Path) -> ConfigToml {
        self.with(&format!("[control]\nsocket = \"{}\"", path.display()))
    }

    /// `text` as it is (limits, other tables), after a blank line.
    pub fn with(mut self, text: &str) -> ConfigToml {
        self.0.push('\n');
        self.0.push_str(text);
        if !text.ends_with('\n') {
            self.0.push('\n');
        }
        self
    }

    /// The config's text.
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ConfigToml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
