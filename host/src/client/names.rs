//! Module names and their versions: a module uploaded under a name (`POST
//! /v1/modules?name=orders`, `wfhost deploy --name orders`) takes that name's next version, and a
//! start names a module by its hash, by name (its latest version) or by `name@version`. The
//! workflows a named start starts show the name (`wfhost list`, `--of orders`); the engine loads
//! the bytes as any stored module (`wfhost:<hash>`, with the grants of stored modules), so a name
//! never borrows the grants of a module the host loaded under the same name.

use std::collections::HashMap;

use super::store::StoreBackend;
use super::types::ModuleVersion;
use crate::durable::store::ModuleName;
use crate::error::{Error, ErrorKind, Result};

/// Why `name` cannot name a module, if it cannot: 1 to 100 characters, ASCII letters, digits,
/// `-`, `_` and `.`, starting with a letter, and not 64 hex digits (a hash's form).
pub fn bad_module_name(name: &str) -> Option<&'static str> {
    let looks_like_hash = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
    (name.is_empty()
        || name.len() > 100
        || !name.starts_with(|c: char| c.is_ascii_alphabetic())
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        || looks_like_hash)
        .then_some(
            "a module name must be 1 to 100 characters, ASCII letters, digits, '-', '_' and '.', \
             starting with a letter (`orders`, `billing.v2`); a version follows it after '@' \
             (`orders@3`)",
        )
}

/// Why `text` cannot name a module in a start, if it cannot: it must be a module's SHA-256 (64
/// hex digits), a name ([`bad_module_name`]) or `name@version`.
pub fn bad_module_reference(text: &str) -> Option<String> {
    Reference::parse(text)
        .err()
        .map(|error| error.message().to_string())
}

/// How a start names its module: by hash, or by name and, optionally, version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reference<'a> {
    /// Its SHA-256.
    Hash(&'a str),
    /// A name, at a version (`None`: its latest).
    Name(&'a str, Option<u64>),
}

impl<'a> Reference<'a> {
    /// `text` read as a module reference: 64 hex digits, `name` or `name@version`; an
    /// [`ErrorKind::InvalidInput`] error saying what is wrong otherwise.
    pub(crate) fn parse(text: &'a str) -> Result<Reference<'a>> {
        if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(Reference::Hash(text));
        }
        let (name, version) = match text.rsplit_once('@') {
            Some((name, version)) => {
                let version = version
                    .parse::<u64>()
                    .ok()
                    .filter(|v| *v >= 1)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::InvalidInput,
                            format!(
                                "module '{text}': the version after '@' must be a number from 1 \
                             (`orders@3`)"
                            ),
                        )
                    })?;
                (name, Some(version))
            }
            None => (text, None),
        };
        if let Some(why) = bad_module_name(name) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "module '{text}' is neither a module's SHA-256 (64 hex digits) nor a name: \
                     {why}"
                ),
            ));
        }
        Ok(Reference::Name(name, version))
    }
}

impl StoreBackend {
    /// The module a start of workflow `id` by `reference` runs: as [`resolve`](Self::resolve),
    /// but a workflow `id` started by the same name before (a start sent again) is followed
    /// whichever version the name's latest is now: its module.
    pub(crate) fn resolve_start(
        &self,
        id: &str,
        reference: &str,
    ) -> Result<(String, Option<String>)> {
        if let Reference::Name(name, None) = Reference::parse(reference)? {
            let existing = self.read(|store| store.workflow(id))?;
            if let Some(existing) = existing.filter(|w| w.start.parent.is_none()) {
                if existing.start.module_name == name {
                    return Ok((existing.start.module, Some(name.to_string())));
                }
            }
        }
        self.resolve(reference)
    }

    /// The module `reference` names: its hash, and the name a workflow started from it shows
    /// (`None` for a hash).
    pub(crate) fn resolve(&self, reference: &str) -> Result<(String, Option<String>)> {
        match Reference::parse(reference)? {
            Reference::Hash(hash) => Ok((hash.to_ascii_lowercase(), None)),
            Reference::Name(name, version) => {
                let named = self.read(|store| store.module_named(name, version))?;
                let named = named.ok_or_else(|| match version {
                    None => Error::new(
                        ErrorKind::UnknownModule,
                        format!(
                            "no module is named '{name}': upload one under that name first \
                             (`wfhost deploy SOURCE --name {name}`, or POST \
                             /v1/modules?name={name})"
                        ),
                    ),
                    Some(version) => Error::new(
                        ErrorKind::UnknownModule,
                        format!(
                            "module '{name}' has no version {version} (`wfhost modules` lists \
                             the versions kept)"
                        ),
                    ),
                })?;
                Ok((named.hash, Some(named.name)))
            }
        }
    }

    /// The version of name `name` that module `hash` is (its latest, if it is several).
    pub(crate) fn version_of(&self, name: &str, hash: &str) -> Result<Option<ModuleVersion>> {
        let names = self.read(|store| store.module_names())?;
        Ok(names
            .into_iter()
            .filter(|n| n.name == name && n.hash == hash)
            .max_by_key(|n| n.version)
            .map(|n| ModuleVersion {
                name: n.name,
                version: n.version,
            }))
    }

    /// The names of each module, by hash.
    pub(crate) fn names_by_hash(&self) -> Result<HashMap<String, Vec<ModuleVersion>>> {
        let names: Vec<ModuleName> = self.read(|store| store.module_names())?;
        let mut by_hash: HashMap<String, Vec<ModuleVersion>> = HashMap::new();
        for name in names {
            by_hash.entry(name.hash).or_default().push(ModuleVersion {
                name: name.name,
                version: name.version,
            });
        }
        Ok(by_hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_read_as_hashes_names_and_versions() {
        let hash = "ab".repeat(32);
        assert_eq!(Reference::parse(&hash).unwrap(), Reference::Hash(&hash));
        assert_eq!(
            Reference::parse("orders").unwrap(),
            Reference::Name("orders", None)
        );
        assert_eq!(
            Reference::parse("billing.v2@3").unwrap(),
            Reference::Name("billing.v2", Some(3))
        );
        for bad in [
            "", "orders@", "orders@0", "orders@x", "9lives", "a b", "wfhost:x", "x@1@2",
        ] {
            let error = Reference::parse(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidInput, "{bad}: {error}");
        }
        assert!(bad_module_name(&"a".repeat(100)).is_none());
        assert!(bad_module_name(&"a".repeat(101)).is_some());
        assert!(bad_module_name(&"abcdef0123".repeat(7)[..64]).is_some());
    }
}
