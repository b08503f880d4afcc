//! Paths of the guest modules built for wasm32-wasip1 by this crate's build script: the examples
//! and the test guests (`tests/guests/`). Tests depend on this crate and run the modules.

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

/// The workspace's root directory.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}
