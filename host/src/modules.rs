//! The modules a host has loaded, by name, and what a process of one runs with.
//!
//! A module's life follows the workflows that use it. Every process holds the module it runs
//! (its [`Loaded`], in its spec), and finds the module its spawns of "this module" run through
//! that handle, never through the name: unloading or replacing a name stops new starts under it,
//! and nothing that runs. The store's copies of modules (loaded as `wfhost:<hash>` for clients'
//! starts, recoveries and upgrades) are a cache bounded by memory: one goes only when no process
//! and no request holds it, least recently used first, and comes back from the store when asked
//! for again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::wasm::{Compiled, Loaded};

/// The prefix of the names the store's copies of modules are loaded under.
const STORED: &str = "wfhost:";

/// The memory (compiled code and memory images) the store's copies that no workflow holds may
/// keep loaded, at most: past it, the least recently used of them go.
pub(crate) const STORED_MODULES_MEMORY: usize = 256 << 20;

/// A module in the table, when it was last asked for, and whether it is a store's copy (which
/// goes when nothing holds it and memory is short).
struct Named {
    loaded: Loaded,
    used: AtomicU64,
    stored: bool,
}

/// The grants of the store's copies that went, remembered at most: past it, one is forgotten for
/// each that comes (a workflow of such a module then waits for a host that loads it, or runs
/// under the grants given for modules not loaded, as it would on a new host).
const REMEMBERED: usize = 10_000;

/// Modules loaded into a host, by name. A module replaced or unloaded stays compiled while
/// processes run it, and is freed (its code, its image, its warm instances) after the last.
pub(crate) struct Modules {
    by_name: RwLock<HashMap<String, Named>>,
    /// Ticks of use, for the least recently used.
    clock: AtomicU64,
    /// What the store's copies no workflow holds may take ([`STORED_MODULES_MEMORY`]).
    budget: usize,
    /// The grants of the store's copies that were let go, by name: they come back with them.
    remembered: parking_lot::Mutex<HashMap<String, Arc<Grants>>>,
}

impl Default for Modules {
    fn default() -> Self {
        Modules::with_budget(STORED_MODULES_MEMORY)
    }
}

impl Modules {
    pub(crate) fn with_budget(budget: usize) -> Modules {
        Modules {
            by_name: RwLock::new(HashMap::new()),
            clock: AtomicU64::new(0),
            budget,
            remembered: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn get(&self, name: &str) -> Result<Loaded> {
        let by_name = self.by_name.read();
        match by_name.get(name) {
            Some(named) => {
                named.used.store(self.tick(), Ordering::Relaxed);
                Ok(named.loaded.clone())
            }
            None => Err(unknown(name, by_name.keys())),
        }
    }

    /// A module loaded with these bytes (by their SHA-256), under any name.
    pub(crate) fn by_hash(&self, hash: &str) -> Option<Loaded> {
        let by_name = self.by_name.read();
        let mut found: Vec<&Named> = by_name
            .values()
            .filter(|named| named.loaded.compiled.info.sha256 == hash)
            .collect();
        // The same one each time when several names share the bytes, and one the embedder
        // loaded before the store's copy (`wfhost:<hash>`).
        found.sort_by_key(|named| {
            (
                named.loaded.name.starts_with(STORED),
                named.loaded.name.clone(),
            )
        });
        found.first().map(|named| {
            named.used.store(self.tick(), Ordering::Relaxed);
            named.loaded.clone()
        })
    }

    /// Loads `compiled` under `name` (the embedder's), replacing any module of that name: it
    /// stays until unloaded.
    pub(crate) fn insert(&self, name: &str, compiled: Arc<Compiled>, grants: Grants) -> Loaded {
        self.insert_as(name, compiled, grants, false)
    }

    /// Loads the store's copy of a module under `name` (`wfhost:<hash>`): the module as loaded,
    /// held for the caller. Once nothing holds it, it may go when memory is short (see
    /// [`STORED_MODULES_MEMORY`]), and comes back from the store when asked for.
    pub(crate) fn insert_stored(
        &self,
        name: &str,
        compiled: Arc<Compiled>,
        grants: Grants,
    ) -> Loaded {
        self.insert_as(name, compiled, grants, true)
    }

    fn insert_as(
        &self,
        name: &str,
        compiled: Arc<Compiled>,
        grants: Grants,
        stored: bool,
    ) -> Loaded {
        let loaded = Loaded {
            name: Arc::from(name),
            compiled,
            grants: Arc::new(grants),
        };
        let named = Named {
            loaded: loaded.clone(),
            used: AtomicU64::new(self.tick()),
            stored,
        };
        // What goes is dropped outside the lock: freeing a module may free its warm instances.
        let (replaced, trimmed) = {
            let mut by_name = self.by_name.write();
            let replaced = by_name.insert(name.to_string(), named);
            (replaced, self.trim(&mut by_name))
        };
        let mut remembered = self.remembered.lock();
        remembered.remove(name);
        for named in &trimmed {
            if remembered.len() >= REMEMBERED {
                if let Some(oldest) = remembered.keys().next().cloned() {
                    remembered.remove(&oldest);
                }
            }
            remembered.insert(
                named.loaded.name.to_string(),
                Arc::clone(&named.loaded.grants),
            );
        }
        drop(remembered);
        drop((replaced, trimmed));
        loaded
    }

    /// The grants the store's copy loaded as `name` had when it was let go, if it was.
    pub(crate) fn remembered(&self, name: &str) -> Option<Grants> {
        self.remembered
            .lock()
            .get(name)
            .map(|grants| (**grants).clone())
    }

    /// The store's copies that go to bring those no workflow holds within the budget, least
    /// recently used first; never one a process or a request holds.
    fn trim(&self, by_name: &mut HashMap<String, Named>) -> Vec<Named> {
        let mut idle: Vec<(u64, usize, String)> = by_name
            .values()
            .filter(|named| named.stored && Arc::strong_count(&named.loaded.compiled) == 1)
            .map(|named| {
                (
                    named.used.load(Ordering::Relaxed),
                    named.loaded.compiled.memory_bytes(),
                    named.loaded.name.to_string(),
                )
            })
            .collect();
        let mut kept: usize = idle.iter().map(|(_, bytes, _)| bytes).sum();
        if kept <= self.budget {
            return Vec::new();
        }
        idle.sort_unstable();
        let mut gone = Vec::new();
        for (_, bytes, name) in idle {
            if kept <= self.budget {
                break;
            }
            if let Some(named) = by_name.remove(&name) {
                tracing::debug!(module = %name, bytes, "a module no workflow uses was unloaded");
                gone.push(named);
            }
            kept -= bytes;
        }
        gone
    }

    /// Unloads `name`: nothing can be started from it any more (what runs it goes on).
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

/// The error for a name nothing is loaded under: it lists the names the embedder loaded, not
/// the store's copies (those are other clients' modules, by hash).
fn unknown<'a>(name: &str, names: impl Iterator<Item = &'a String>) -> Error {
    let mut known: Vec<&str> = names
        .map(String::as_str)
        .filter(|n| !n.starts_with(STORED))
        .collect();
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
