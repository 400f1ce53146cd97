//! The shipped `dra-loadgen` scenarios (the files with `[[phase]]` under `config/`,
//! beside the agent configs that dra-userspace/tests/config_files.rs checks) are valid.

mod support;

use dra_tools::loadgen::scenario::Scenario;
use support::{is_scenario, repo_root, toml_files_under};

#[test]
fn every_shipped_scenario_file_is_valid() {
    let mut failures = String::new();
    let mut scenarios = 0;
    for f in toml_files_under(&repo_root().join("config")) {
        if is_scenario(&f) {
            scenarios += 1;
            if let Err(e) = Scenario::load(&f) {
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
