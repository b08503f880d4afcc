//! The modules a host has loaded, by name, and what a process of one runs with.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::wasm::{Compiled, Limits, ProcessSpec};

/// A loaded module: the name it was loaded under, its compiled form, and what it may do.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) name: Arc<str>,
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) grants: Arc<Grants>,
}

impl Loaded {
    /// What a process of this module runs with: these limits, and its grants unless `grants`
    /// replaces them (which then also bound its children's).
    pub(crate) fn spec(&self, grants: Option<Arc<Grants>>, limits: Arc<Limits>) -> ProcessSpec {
        ProcessSpec {
            compiled: Arc::clone(&self.compiled),
            module_name: Arc::clone(&self.name),
            bound: grants.is_some(),
            grants: grants.unwrap_or_else(|| Arc::clone(&self.grants)),
            limits,
        }
    }
}

/// Modules loaded into a host, by name. A module replaced or unloaded stays compiled while
/// processes run it, and is freed (its code, its image, its warm instances) after the last.
#[derive(Default)]
pub(crate) struct Modules {
    by_name: RwLock<HashMap<String, Loaded>>,
}

impl Modules {
    pub(crate) fn get(&self, name: &str) -> Result<Loaded> {
        let by_name = self.by_name.read();
        by_name.get(name).cloned().ok_or_else(|| {
            let mut known: Vec<&str> = by_name.keys().map(String::as_str).collect();
            known.sort();
            Error::new(
                ErrorKind::UnknownModule,
                format!(
                    "no module is loaded under the name '{name}' (loaded: {})",
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// A module loaded with these bytes (by their SHA-256), under any name.
    pub(crate) fn by_hash(&self, hash: &str) -> Option<Loaded> {
        let by_name = self.by_name.read();
        let mut found: Vec<&Loaded> = by_name
            .values()
            .filter(|loaded| loaded.compiled.info.sha256 == hash)
            .collect();
        // The same one each time when several names share the bytes, and one the embedder
        // loaded before the store's copy (`wfhost:<hash>`).
        found.sort_by_key(|loaded| (loaded.name.starts_with("wfhost:"), loaded.name.clone()));
        found.first().map(|loaded| (*loaded).clone())
    }

    /// Loads `compiled` under `name`, replacing any module of that name.
    pub(crate) fn insert(&self, name: &str, compiled: Arc<Compiled>, grants: Grants) {
        let loaded = Loaded {
            name: Arc::from(name),
            compiled,
            grants: Arc::new(grants),
        };
        // The module replaced, if any, is dropped outside the lock: freeing it may free its warm
        // instances.
        let replaced = self.by_name.write().insert(name.to_string(), loaded);
        drop(replaced);
    }

    /// Unloads `name`: no process can be spawned from it any more.
    pub(crate) fn remove(&self, name: &str) -> Result<()> {
        let removed = self.by_name.write().remove(name);
        match removed {
            Some(_) => Ok(()),
            None => self.get(name).map(drop),
        }
    }

    /// Drops every module (at shutdown).
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.by_name.write());
        drop(all);
    }
}

/// The bytes of the module file at `path`, or an error that names it.
pub(crate) fn read_module(path: &std::path::Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot read module {}: {e}", path.display()),
        )
    })
}
