//! [`TempDir`]: a temporary directory removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A new directory under the system's temporary directory, removed with its contents
/// on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `<temp>/<prefix><pid>-<n>`, created.
    pub fn new(prefix: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), prefix)
    }

    /// `<parent>/<prefix><pid>-<n>`, created.
    pub fn new_in(parent: &Path, prefix: &str) -> TempDir {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let p = parent.join(format!("{prefix}{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
