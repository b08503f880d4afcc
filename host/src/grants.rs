//! Capabilities: which commands a module's processes may use.
//!
//! WASI gives a workflow nothing (no files, no environment, no sockets), so everything it can do
//! outside its own memory is a command. A module's [`Grants`] decide which: by default every
//! built-in command and no host function, so a module can reach a payment API or a database only if
//! the embedder names that command for it. A command outside the grants completes with a
//! `not-allowed` error that the workflow sees; nothing runs.

use std::collections::BTreeSet;

use wfcontract::{Command, CommandError, CommandKind, ErrorKind};

/// What a module may ask the host to do.
///
/// WASI gives a workflow nothing (no files, no environment, no sockets), so everything it can do
/// outside its own memory is a command. Grants decide which: by default every built-in command and
/// no host function, so a module reaches a payment API or a database only if the embedder names
/// that command for it. A command outside the grants completes with a `not-allowed` error that the
/// workflow sees; nothing runs.
///
/// ```
/// use wfhost::{CommandKind, Grants};
///
/// // Every built-in, plus one host function.
/// let billing = Grants::default().allow_function("payments.charge");
/// // No children and no host functions at all.
/// let leaf = Grants::default().deny(CommandKind::Spawn);
/// # let _ = (billing, leaf);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grants {
    /// The built-in commands granted (never `Call`, which `host_functions` governs, nor `Forget`,
    /// which only withdraws a process's own request and is always allowed).
    builtins: BTreeSet<CommandKind>,
    host_functions: HostFunctions,
    /// Host functions withdrawn by name, whatever `host_functions` says.
    denied_functions: BTreeSet<String>,
    /// May cancel and join processes other than its own children.
    any_process: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostFunctions {
    Named(BTreeSet<String>),
    All,
}

impl Default for Grants {
    /// Every built-in command (sleep, sleep-until, log, send, spawn, join, cancel, now, random),
    /// with `cancel`
    /// and `join` reaching only the process's own children; no host functions.
    fn default() -> Self {
        Grants {
            builtins: CommandKind::ALL
                .into_iter()
                .filter(|&kind| is_builtin(kind))
                .collect(),
            host_functions: HostFunctions::Named(BTreeSet::new()),
            denied_functions: BTreeSet::new(),
            any_process: false,
        }
    }
}

/// Whether `kind` is a built-in that grants govern one by one.
fn is_builtin(kind: CommandKind) -> bool {
    !matches!(
        kind,
        CommandKind::Call | CommandKind::Retry | CommandKind::Forget
    )
}

impl Grants {
    /// No commands at all: the module can compute and finish, and nothing else.
    pub fn none() -> Grants {
        Grants {
            builtins: BTreeSet::new(),
            host_functions: HostFunctions::Named(BTreeSet::new()),
            denied_functions: BTreeSet::new(),
            any_process: false,
        }
    }

    /// Also allows host function `name` (as registered with
    /// [`HostBuilder::function`](crate::HostBuilder::function)).
    pub fn allow_function(mut self, name: impl Into<String>) -> Grants {
        if let HostFunctions::Named(names) = &mut self.host_functions {
            names.insert(name.into());
        }
        self
    }

    /// Also allows the built-in HTTP client, `wfhost.http` (what it may reach is the host's
    /// allowlist: [`HostBuilder::allow_http`](crate::HostBuilder::allow_http)).
    pub fn allow_http(self) -> Grants {
        self.allow_function(wfcontract::builtin::HTTP_FUNCTION)
    }

    /// Withdraws host function `name`, whatever else these grants allow (`wfhost.http` for
    /// the HTTP client).
    pub fn deny_function(mut self, name: impl Into<String>) -> Grants {
        self.denied_functions.insert(name.into());
        self
    }

    /// Allows every host function, including ones registered later. For modules you trust.
    pub fn allow_all_functions(mut self) -> Grants {
        self.host_functions = HostFunctions::All;
        self
    }

    /// Also allows built-in command `kind`. `Call` is governed by
    /// [`allow_function`](Self::allow_function) instead, and `Forget` is always allowed.
    pub fn allow(mut self, kind: CommandKind) -> Grants {
        if is_builtin(kind) {
            self.builtins.insert(kind);
        }
        self
    }

    /// Lets `cancel` and `join` reach any process, not only the caller's own children: for
    /// supervisors you trust. (`send` reaches any pid whatever the grants: a message waits in its
    /// receiver's bounded mailbox until the receiver asks for it, so all it can take is mailbox
    /// space, and a full mailbox refuses it.)
    pub fn allow_any_process(mut self) -> Grants {
        self.any_process = true;
        self
    }

    /// Whether `cancel` and `join` may reach processes other than the caller's own children.
    pub fn reaches_any_process(&self) -> bool {
        self.any_process
    }

    /// Withdraws built-in command `kind`; `Call` withdraws every host function, `Sleep` both
    /// kinds of sleep (`sleep-until` is a sleep too). `Forget` stays.
    pub fn deny(mut self, kind: CommandKind) -> Grants {
        match kind {
            CommandKind::Call => self.host_functions = HostFunctions::Named(BTreeSet::new()),
            CommandKind::Sleep => {
                self.builtins.remove(&CommandKind::SleepUntil);
            }
            _ => {}
        }
        self.builtins.remove(&kind);
        self
    }

    /// What both these grants and `other` allow.
    pub(crate) fn intersection(&self, other: &Grants) -> Grants {
        use HostFunctions::{All, Named};
        let host_functions = match (&self.host_functions, &other.host_functions) {
            (All, All) => All,
            (All, Named(names)) | (Named(names), All) => Named(names.clone()),
            (Named(a), Named(b)) => Named(a.intersection(b).cloned().collect()),
        };
        Grants {
            builtins: self
                .builtins
                .intersection(&other.builtins)
                .copied()
                .collect(),
            host_functions,
            denied_functions: self
                .denied_functions
                .union(&other.denied_functions)
                .cloned()
                .collect(),
            any_process: self.any_process && other.any_process,
        }
    }

    /// Whether these grants let a process run `command`; if not, the `not-allowed` error its
    /// yield completes with.
    pub fn permits(&self, command: &Command) -> Result<(), CommandError> {
        let kind = command.kind();
        // A retry is the call again: the same grant.
        let allowed = match (command, command.call()) {
            (Command::Forget(_), _) => true,
            // Asking the host's retry policy reveals nothing and does nothing.
            (_, Some(call)) if call.name == wfcontract::builtin::RETRY_POLICY_FUNCTION => true,
            (_, Some(call)) if self.denied_functions.contains(&call.name) => false,
            (_, Some(call)) => match &self.host_functions {
                HostFunctions::All => true,
                HostFunctions::Named(names) => names.contains(&call.name),
            },
            _ => self.builtins.contains(&kind),
        };
        if allowed {
            return Ok(());
        }
        let message = match command.call() {
            Some(call) if self.denied_functions.contains(&call.name) => format!(
                "this module may not call host function '{}': the host withdrew it from this \
                 module",
                call.name
            ),
            Some(call) if call.name == wfcontract::builtin::HTTP_FUNCTION => format!(
                "this module may not make HTTP requests: the host did not grant '{}' (an \
                 operator allows URLs with --allow-http PATTERN; an embedder with \
                 HostBuilder::allow_http and Grants::allow_http)",
                call.name
            ),
            Some(call) => format!(
                "this module may not call host function '{}': the host did not grant it ({})",
                call.name,
                self.describe_host_functions()
            ),
            _ => format!(
                "this module may not use the '{}' command: the host did not grant it",
                kind.name()
            ),
        };
        Err(CommandError::new(ErrorKind::NotAllowed, message))
    }

    fn describe_host_functions(&self) -> String {
        match &self.host_functions {
            HostFunctions::All => "it grants all".into(),
            HostFunctions::Named(names) if names.is_empty() => "it grants none".into(),
            HostFunctions::Named(names) => format!(
                "it grants {}",
                names
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use wfcontract::{CallRequest, Payload, Pid, Tag};

    fn call(name: &str) -> Command {
        Command::Call(CallRequest {
            name: name.into(),
            input: Payload::empty(),
        })
    }

    #[test]
    fn the_default_grants_every_builtin_and_no_host_command() {
        let grants = Grants::default();
        assert_eq!(grants.permits(&Command::Sleep(Duration::ZERO)), Ok(()));
        assert_eq!(grants.permits(&Command::Join(Pid(1))), Ok(()));
        assert_eq!(grants.permits(&Command::Forget(Tag(1))), Ok(()));
        let refused = grants.permits(&call("payments.charge")).unwrap_err();
        assert_eq!(refused.kind, ErrorKind::NotAllowed);
        assert_eq!(
            refused.message,
            "this module may not call host function 'payments.charge': the host did not grant it \
             (it grants none)"
        );
    }

    #[test]
    fn named_commands_and_denied_builtins() {
        let grants = Grants::default()
            .allow_function("a")
            .deny(CommandKind::Spawn);
        assert_eq!(grants.permits(&call("a")), Ok(()));
        assert_eq!(
            grants.permits(&call("b")).unwrap_err().message,
            "this module may not call host function 'b': the host did not grant it (it grants a)"
        );
        assert_eq!(grants.permits(&Command::Now).map_err(|e| e.kind), Ok(()));
        let spawn = Command::Spawn(wfcontract::SpawnRequest {
            module: None,
            entry: "x".into(),
            input: Payload::empty(),
        });
        assert_eq!(
            grants.permits(&spawn).unwrap_err().message,
            "this module may not use the 'spawn' command: the host did not grant it"
        );
        assert_eq!(
            grants
                .clone()
                .deny(CommandKind::Call)
                .permits(&call("a"))
                .map_err(|e| e.kind),
            Err(ErrorKind::NotAllowed)
        );
        assert_eq!(
            Grants::none().permits(&Command::Now).map_err(|e| e.kind),
            Err(ErrorKind::NotAllowed)
        );
        assert_eq!(
            Grants::none().allow_all_functions().permits(&call("z")),
            Ok(())
        );
    }

    /// Denying sleeps denies both kinds: `sleep-until` is no way around it.
    #[test]
    fn denying_sleep_denies_sleep_until_too() {
        let grants = Grants::default().deny(CommandKind::Sleep);
        for sleep in [Command::Sleep(Duration::ZERO), Command::SleepUntil(0)] {
            assert_eq!(
                grants.permits(&sleep).map_err(|e| e.kind),
                Err(ErrorKind::NotAllowed)
            );
        }
        let until_only = Grants::default().deny(CommandKind::SleepUntil);
        assert_eq!(until_only.permits(&Command::Sleep(Duration::ZERO)), Ok(()));
        assert_eq!(
            until_only
                .permits(&Command::SleepUntil(0))
                .map_err(|e| e.kind),
            Err(ErrorKind::NotAllowed)
        );
    }
}
