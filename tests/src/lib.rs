//! Paths of the guest modules built for wasm32-wasip1 by this crate's build script: the examples
//! and the test guests (`tests/guests/`). Tests depend on this crate and run the modules.

pub mod postgres;

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

/// The workspace's root directory, found when asked: from the running test's package (cargo
/// names it in `CARGO_MANIFEST_DIR` at run time), so a test binary reused from a build of another
/// checkout of the same tree still reads this checkout's files.
pub fn workspace_root() -> std::path::PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|manifest| manifest.contains("[workspace]"))
        })
        .map(std::path::Path::to_path_buf)
        .unwrap_or(start)
}
