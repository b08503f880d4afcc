//! The module manifest, built at compile time by `entry_points!`: the text of
//! `wfcontract::manifest`, as a byte array a `link_section` static can hold.

use wfcontract::abi::VERSION;
use wfcontract::manifest::{ABI_KEY, ENTRY_KEY};

const fn digits(mut n: u32) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

/// The manifest's length for these entry points.
pub const fn manifest_len(names: &[&str]) -> usize {
    let mut len = ABI_KEY.len() + 1 + digits(VERSION) + 1;
    let mut i = 0;
    while i < names.len() {
        len += ENTRY_KEY.len() + 1 + names[i].len() + 1;
        i += 1;
    }
    len
}

const fn put(out: &mut [u8], mut at: usize, bytes: &[u8]) -> usize {
    let mut i = 0;
    while i < bytes.len() {
        out[at] = bytes[i];
        at += 1;
        i += 1;
    }
    at
}

/// The manifest: `wfhost-abi <VERSION>` then one `entry <name>` line per entry point.
pub const fn manifest<const N: usize>(names: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = put(&mut out, 0, ABI_KEY.as_bytes());
    at = put(&mut out, at, b" ");
    let width = digits(VERSION);
    let mut d = 0;
    while d < width {
        let mut n = VERSION;
        let mut skip = width - 1 - d;
        while skip > 0 {
            n /= 10;
            skip -= 1;
        }
        out[at] = b'0' + (n % 10) as u8;
        at += 1;
        d += 1;
    }
    at = put(&mut out, at, b"\n");
    let mut i = 0;
    while i < names.len() {
        at = put(&mut out, at, ENTRY_KEY.as_bytes());
        at = put(&mut out, at, b" ");
        at = put(&mut out, at, names[i].as_bytes());
        at = put(&mut out, at, b"\n");
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wfcontract::manifest::Manifest;

    #[test]
    fn the_const_manifest_parses_back() {
        const NAMES: &[&str] = &["greet", "shout"];
        const LEN: usize = manifest_len(NAMES);
        const BYTES: [u8; LEN] = manifest::<LEN>(NAMES);
        let parsed = Manifest::parse(&BYTES).unwrap();
        assert_eq!(parsed.abi_version, VERSION);
        assert_eq!(parsed.entries, ["greet", "shout"]);
    }
}
