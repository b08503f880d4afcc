//! What a guest's `spawn` starts: a process of a loaded module, with its grants (bounded by its
//! parent's, when those were narrowed) and its parent's limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use wfcontract::{CommandError, ErrorKind, Pid, SpawnRequest};
use wfhost_scheduler::{Error, FailureKind, Note, Spawn, Spawner};

use crate::durable::now_millis;
use crate::durable::process::DurableProcess;
use crate::durable::store::{Ending, Op};
use crate::durable::writer::{Done, Submission};
use crate::durable::Durable;
use crate::modules::Modules;
use crate::wasm::capacity::Capacity;
use crate::wasm::Loaded;
use crate::wasm::{WasmProcess, WasmRuntime};

/// Makes the wasm processes guests spawn.
pub(crate) struct GuestSpawner {
    pub(crate) wasm: Arc<WasmRuntime>,
    pub(crate) modules: Arc<Modules>,
    pub(crate) capacity: Capacity,
    /// Set once the operator has been told the host is full.
    pub(crate) warned: AtomicBool,
    /// The journal, when the host is durable: a durable workflow's children are durable too.
    pub(crate) durable: Option<Arc<Durable>>,
}

/// A child a durable workflow's step journaled (its note on the spawn): its pid, id and module.
struct ChildStart {
    pid: Pid,
    id: Arc<str>,
    module: Arc<str>,
}

impl GuestSpawner {
    /// A journaled child that could not start: its end is journaled before its parent hears.
    fn refuse_child(&self, child: Pid, error: &CommandError) {
        if let Some(durable) = &self.durable {
            let entry = Submission {
                ops: vec![Op::End {
                    num: child.0,
                    ending: Ending::Failed {
                        kind: FailureKind::Refused.name().into(),
                        message: error.message.clone(),
                    },
                    at: now_millis(),
                }],
                done: Done::Nothing,
            };
            if let Err(e) = durable.writer.submit(entry) {
                tracing::error!("a refused child could not be journaled: {e}");
            }
        }
    }
}

impl Spawner for GuestSpawner {
    fn process(
        &self,
        parent: Pid,
        lineage: Option<&(dyn std::any::Any + Send + Sync)>,
        note: Option<Note>,
        request: SpawnRequest,
    ) -> Result<Spawn, CommandError> {
        let child = match (note, &self.durable) {
            (Some(Note::Child(pid, id, module)), Some(_)) => Some(ChildStart { pid, id, module }),
            _ => None,
        };
        let own = lineage.and_then(|own| own.downcast_ref::<Loaded>());
        let spawn = self.make(parent, own, request, child.as_ref());
        if let (Err(error), Some(child)) = (&spawn, &child) {
            self.refuse_child(child.pid, error);
        }
        spawn
    }

    fn refused(&self, error: Error) -> CommandError {
        // A journaled child the scheduler refused journals its own end when it is dropped
        // unstarted (`DurableProcess`'s drop).
        self.refused_error(error)
    }
}

impl GuestSpawner {
    /// The child `request` asks for: of the module it names, or of the parent's own module
    /// (`own`, which the parent holds) when it names none or the name its module goes by here.
    fn make(
        &self,
        parent: Pid,
        own: Option<&Loaded>,
        request: SpawnRequest,
        child: Option<&ChildStart>,
    ) -> Result<Spawn, CommandError> {
        let invalid = |message: String| CommandError::new(ErrorKind::InvalidInput, message);
        let loaded = match (request.module.as_deref(), own) {
            (None, Some(own)) => own.clone(),
            (Some(name), Some(own)) if *own.name == *name => own.clone(),
            (None, None) => {
                return Err(invalid(
                    "spawn names no module, and the spawner is not a wasm process".into(),
                ))
            }
            (Some(name), _) => self
                .modules
                .get(name)
                .map_err(|e| invalid(e.message().to_string()))?,
        };
        // A durable child runs the module its start was journaled with: a name loaded again
        // with other bytes between the journal and now means another module.
        let loaded = match child {
            Some(child) if loaded.compiled.info.sha256 != *child.module => {
                self.modules.by_hash(&child.module).ok_or_else(|| {
                    invalid(format!(
                        "the module '{}' was replaced (by {}) after this spawn was journaled \
                         with {}, which is no longer loaded",
                        loaded.name, loaded.compiled.info.sha256, child.module
                    ))
                })?
            }
            _ => loaded,
        };
        let info = &loaded.compiled.info;
        if !info.has_entry(&request.entry) {
            return Err(invalid(
                info.unknown_entry(&request.entry).message().to_string(),
            ));
        }
        // Within its parent's limits, and its parent's grants if they were narrowed.
        let inherited = self.wasm.inherited(parent);
        let grants = inherited
            .bound
            .map(|bound| Arc::new(loaded.grants.intersection(&bound)));
        let spec = loaded.spec(grants, inherited.limits);
        let confined = !spec.grants.reaches_any_process();
        let process = WasmProcess::new(Arc::clone(&self.wasm), spec);
        let (Some(child), Some(durable)) = (child, &self.durable) else {
            return Ok(Spawn::new(process, request.entry, request.input).confined(confined));
        };
        // Its run's span is a child of its parent's run's.
        let run = durable
            .traces()
            .and_then(|traces| traces.traceparent_of(parent));
        let process = DurableProcess::new(
            process,
            Arc::clone(durable),
            Arc::clone(&child.id),
            Arc::from(info.sha256.as_str()),
        )
        .reserved(child.pid)
        .traced(run.as_deref(), &request.entry, (None, false));
        durable.ids.insert(child.pid, Arc::clone(&child.id));
        Ok(Spawn::new(process, request.entry, request.input)
            .confined(confined)
            .pid(child.pid)
            .survives_stop(true))
    }

    fn refused_error(&self, error: Error) -> CommandError {
        match error {
            Error::TooManyProcesses(_) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!("a guest's spawn was refused: {}", self.capacity.refusal());
                }
                CommandError::new(ErrorKind::LimitReached, self.capacity.guest_refusal())
            }
            other => other.into_command_error(),
        }
    }
}
