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

/// The probe module as version `v` of its `versioned` workflow (1 as built): the last byte of
/// its version marker changed, so each version is a build of its own, by hash.
pub fn probe_version(v: u8) -> Vec<u8> {
    let mut bytes = std::fs::read(PROBE).expect("the probe module is built");
    let marker = b"wfprobe-version:1";
    let found: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "the version marker is in the probe module once"
    );
    let at = found[0];
    bytes[at + marker.len() - 1] = b'0' + v;
    bytes
}

/// `module` with a custom section holding `n` appended: the same code, another build by hash
/// (a module of its own to the host and the store).
pub fn variant(module: &[u8], n: u32) -> Vec<u8> {
    let name = b"wfhost-test-variant";
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(&n.to_le_bytes());
    let mut bytes = module.to_vec();
    bytes.push(0);
    // The section's size as LEB128 (it is below 128).
    bytes.push(body.len() as u8);
    bytes.extend_from_slice(&body);
    bytes
}
