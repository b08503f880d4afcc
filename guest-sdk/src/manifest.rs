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

/// Whether `name` is an entry point name the manifest allows (as
/// [`wfcontract::manifest::is_entry_name`], at compile time): ASCII letters, digits, `_`, `-` and
/// `.`, starting with a letter or `_`.
const fn is_entry_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || !(bytes[0].is_ascii_alphabetic() || bytes[0] == b'_') {
        return false;
    }
    let mut i = 1;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.') {
            return false;
        }
        i += 1;
    }
    true
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Fails the build when an entry point name is not one the manifest allows, or is declared twice.
pub const fn check_names(names: &[&str]) {
    let mut i = 0;
    while i < names.len() {
        if !is_entry_name(names[i]) {
            panic!(
                "entry point names are ASCII letters, digits, '_', '-' and '.', starting with a \
                 letter or '_'"
            );
        }
        let mut j = 0;
        while j < i {
            if same(names[i], names[j]) {
                panic!("an entry point name is declared twice in entry_points!");
            }
            j += 1;
        }
        i += 1;
    }
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
    fn the_compile_time_name_check_agrees_with_the_manifest() {
        for name in [
            "greet",
            "send-reminder",
            "v1.order",
            "_x",
            "",
            "9lives",
            "a b",
            "-x",
            "é",
        ] {
            assert_eq!(
                is_entry_name(name),
                wfcontract::manifest::is_entry_name(name),
                "{name}"
            );
        }
    }

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
