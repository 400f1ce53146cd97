//! Configuration (placeholder: replaced by the full schema and validation).
use std::path::Path;

#[derive(Debug)]
pub struct Config;

#[derive(Debug, thiserror::Error)]
#[error("config loading is not implemented yet: {path}\n")]
pub struct ConfigErrors {
    pub path: String,
}

impl Config {
    pub fn summary(&self) -> String {
        String::new()
    }
}

pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    Err(ConfigErrors { path: path.display().to_string() })
}
