//! The shipped `dra-loadgen` scenarios (the files with `[[phase]]` under `config/`,
//! beside the agent configs that dra-userspace/tests/config_files.rs checks) are valid.

use std::path::{Path, PathBuf};

use dra_tools::loadgen::scenario::Scenario;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate lives in the workspace")
        .to_path_buf()
}

fn toml_files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            toml_files_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

#[test]
fn every_shipped_scenario_file_is_valid() {
    let mut files = Vec::new();
    toml_files_under(&repo_root().join("config"), &mut files);
    files.sort();
    let mut failures = String::new();
    let mut scenarios = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let is_scenario = text
            .parse::<toml::Table>()
            .is_ok_and(|t| t.contains_key("phase"));
        if is_scenario {
            scenarios += 1;
            if let Err(e) = Scenario::load(f) {
                failures.push_str(&format!("{}: {}\n", f.display(), dra::error_chain(&e)));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "invalid shipped scenarios:\n{failures}"
    );
    assert!(
        scenarios >= 3,
        "the shipped dra-loadgen scenarios were checked ({scenarios})"
    );
}
