//! How a command ends: the errors that stand for an exit code of their own.

/// The exit code for `error` (see `wfhost --help`): 1 a workflow failed, 3 an id exists with
/// another start, 4 the store stopped the work (resumable), 5 damage in the store, 2 anything
/// else (it could not start).
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<WorkflowFailed>().is_some() {
        return 1;
    }
    if error.downcast_ref::<Stopped>().is_some() {
        return 4;
    }
    if error.downcast_ref::<Damaged>().is_some() {
        return 5;
    }
    match error
        .downcast_ref::<wfhost::Error>()
        .map(wfhost::Error::kind)
    {
        Some(wfhost::ErrorKind::Conflict) => 3,
        Some(wfhost::ErrorKind::Damaged) => 5,
        _ => 2,
    }
}

/// The store stopped the work where its journal ends (full, read-only, out of reach): it resumes
/// on a host started on a working store (exit code 4).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(pub String);

/// A journal in the store cannot be read back: the workflows it holds were left as they were
/// (exit code 5).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Damaged(pub String);

/// The workflow ran and failed (exit code 1, where every other error means it could not start).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WorkflowFailed(pub String);
