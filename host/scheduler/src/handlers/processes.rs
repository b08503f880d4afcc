//! `spawn`, `join`, `cancel`: the commands about other processes.

use std::sync::Arc;

use wfcontract::{Command, CommandError, ErrorKind, Payload, Pid, SpawnRequest};

use crate::error::Error;
use crate::handlers::{Context, Handler, Request};
use crate::spawn::Spawn;

/// Makes the processes `spawn` commands ask for: what a host knows of its modules. The scheduler
/// links the new process to its parent and counts it against the limits.
pub trait Spawner: Send + Sync + 'static {
    /// The process `request` asks for, spawned by `parent`: its body, entry point and input, with
    /// any options. An error completes the spawn with it. `lineage` is the parent's own module as
    /// the parent gives it ([`Process::lineage`](crate::Process::lineage)), for a request that
    /// names none. `note` is what the parent's journal decided about the spawn (a durable host
    /// reserved the child's pid and id: [`Note::Child`](crate::Note::Child)).
    fn process(
        &self,
        parent: Pid,
        lineage: Option<&(dyn std::any::Any + Send + Sync)>,
        note: Option<crate::Note>,
        request: SpawnRequest,
    ) -> Result<Spawn, CommandError>;

    /// The error the spawning process sees when the scheduler refused the new process (a limit,
    /// shutdown). Default: the refusal as it is.
    fn refused(&self, error: Error) -> CommandError {
        error.into_command_error()
    }
}

/// The `spawn` handler over a [`Spawner`].
pub(crate) struct SpawnHandler(pub(crate) Arc<dyn Spawner>);

impl Handler for SpawnHandler {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        let Command::Spawn(spawn) = request.command else {
            return;
        };
        let result = self
            .0
            .process(
                cx.pid(),
                cx.process.lineage(),
                request.note.map(|note| *note),
                spawn,
            )
            .and_then(|spawn| {
                let pid = cx.spawn_child(spawn).map_err(|e| self.0.refused(e))?;
                Payload::to_postcard(&pid)
                    .map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()))
            });
        cx.complete(request.tag, result);
    }
}

/// A confined process may act only on its own children.
fn within_reach(cx: &Context<'_>, target: Pid, verb: &str) -> Result<(), CommandError> {
    if !cx.slot.confined {
        return Ok(());
    }
    match cx.scheduler().shared.slot(target).map(|slot| slot.parent) {
        Some(parent) if parent == Some(cx.pid()) => Ok(()),
        // Gone, or never was: the same answer as for an unconfined process.
        None => Err(Error::NoSuchProcess(target).into_command_error()),
        Some(_) => Err(CommandError::new(
            ErrorKind::NotAllowed,
            format!(
                "process {target} is not a child of this process; this module may {verb} only \
                 its own children"
            ),
        )),
    }
}

pub(crate) fn cancel(request: Request, cx: &Context<'_>) {
    if let Command::Cancel(pid) = request.command {
        if let Err(error) = within_reach(cx, pid, "cancel") {
            return cx.complete(request.tag, Err(error));
        }
        let result = cx.scheduler().cancel(pid);
        cx.complete(
            request.tag,
            result
                .map(|()| Payload::empty())
                .map_err(Error::into_command_error),
        );
    }
}

/// The built-in `join`: waits for the target's result (at once if it has ended and its result is
/// still kept), or completes with `no-such-process`.
pub fn join(request: Request, cx: &Context<'_>) {
    if let Command::Join(pid) = request.command {
        if let Err(error) = within_reach(cx, pid, "join") {
            return cx.complete(request.tag, Err(error));
        }
        cx.scheduler().join(pid, cx.pid(), request.tag);
    }
}
