//! The module manifest: what a module declares about itself without running any code.
//!
//! A guest module carries a custom section named [`SECTION`] holding UTF-8 text lines:
//!
//! ```text
//! wfhost-abi 1
//! entry greet
//! entry shout
//! ```
//!
//! `wfhost-abi <n>` gives the ABI version the module was built for; each `entry <name>` declares an
//! entry point. Because linkers concatenate custom sections of the same name, a module may hold
//! several such blocks (one per crate that declares entry points): every `wfhost-abi` line must
//! agree, and an entry point may be declared only once.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// The custom section's name.
pub const SECTION: &str = "wfhost-manifest";

/// The keyword of the version line.
pub const ABI_KEY: &str = "wfhost-abi";

/// The keyword of an entry-point line.
pub const ENTRY_KEY: &str = "entry";

/// A parsed manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The ABI version the module was built for.
    pub abi_version: u32,
    /// Entry points, in declaration order.
    pub entries: Vec<String>,
}

/// Why a manifest section could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The section is not UTF-8 text.
    #[error("the {SECTION} section is not UTF-8 text")]
    NotText,
    /// A line is neither a version nor an entry point.
    #[error("the {SECTION} section has an unrecognised line {line}: '{text}'")]
    BadLine {
        /// 1-based line number.
        line: usize,
        /// The line as written.
        text: String,
    },
    /// No `wfhost-abi` line.
    #[error("the {SECTION} section does not declare an ABI version ('{ABI_KEY} <n>')")]
    NoVersion,
    /// Two `wfhost-abi` lines disagree.
    #[error("the {SECTION} section declares ABI versions {0} and {1}")]
    ConflictingVersions(u32, u32),
    /// An entry point is declared twice.
    #[error("entry point '{0}' is declared twice")]
    DuplicateEntry(String),
    /// No entry points at all.
    #[error("the module declares no entry points")]
    NoEntries,
}

impl Manifest {
    /// Parses the concatenated contents of every manifest section in a module.
    pub fn parse(section: &[u8]) -> Result<Manifest, ManifestError> {
        let text = core::str::from_utf8(section).map_err(|_| ManifestError::NotText)?;
        let mut abi_version = None;
        let mut entries: Vec<String> = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let bad = || ManifestError::BadLine {
                line: index + 1,
                text: raw.to_string(),
            };
            let (key, value) = line.split_once(' ').ok_or_else(bad)?;
            let value = value.trim();
            match key {
                ABI_KEY => {
                    let version: u32 = value.parse().map_err(|_| bad())?;
                    match abi_version {
                        Some(seen) if seen != version => {
                            return Err(ManifestError::ConflictingVersions(seen, version))
                        }
                        _ => abi_version = Some(version),
                    }
                }
                ENTRY_KEY if is_entry_name(value) => {
                    if entries.iter().any(|e| e == value) {
                        return Err(ManifestError::DuplicateEntry(value.to_string()));
                    }
                    entries.push(value.to_string());
                }
                _ => return Err(bad()),
            }
        }
        let abi_version = abi_version.ok_or(ManifestError::NoVersion)?;
        if entries.is_empty() {
            return Err(ManifestError::NoEntries);
        }
        Ok(Manifest {
            abi_version,
            entries,
        })
    }

    /// True when `entry` is declared.
    pub fn has_entry(&self, entry: &str) -> bool {
        self.entries.iter().any(|e| e == entry)
    }
}

/// Entry names are identifiers: ASCII letters, digits, `_`, `-` and `.`, not starting with a digit.
pub fn is_entry_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn parses_concatenated_blocks() {
        let m = Manifest::parse(b"wfhost-abi 1\nentry greet\nwfhost-abi 1\nentry shout\n").unwrap();
        assert_eq!(m.abi_version, 1);
        assert_eq!(m.entries, vec!["greet".to_string(), "shout".to_string()]);
        assert!(m.has_entry("shout"));
        assert!(!m.has_entry("other"));
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        use ManifestError::*;
        assert_eq!(Manifest::parse(b"entry a\n"), Err(NoVersion));
        assert_eq!(Manifest::parse(b"wfhost-abi 1\n"), Err(NoEntries));
        assert_eq!(
            Manifest::parse(b"wfhost-abi 1\nwfhost-abi 2\nentry a"),
            Err(ConflictingVersions(1, 2))
        );
        assert_eq!(
            Manifest::parse(b"wfhost-abi 1\nentry a\nentry a"),
            Err(DuplicateEntry("a".into()))
        );
        assert_eq!(Manifest::parse(&[0xff, 0xfe]), Err(NotText));
        assert!(matches!(
            Manifest::parse(b"wfhost-abi 1\nentry 9lives"),
            Err(BadLine { line: 2, .. })
        ));
        assert!(matches!(
            Manifest::parse(b"wfhost-abi one\nentry a"),
            Err(BadLine { line: 1, .. })
        ));
    }
}
