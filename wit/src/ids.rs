use serde::{Deserialize, Serialize};

/// Identifies one process for the lifetime of a host.
///
/// Pids are assigned by the host, increase monotonically and are never reused. `Pid::HOST` (zero)
/// is never a process: it names the host itself as the sender of messages that come from outside
/// any process (the embedding application or the CLI).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pid(pub u64);

impl Pid {
    /// The host itself: the sender of messages that no process sent.
    pub const HOST: Pid = Pid(0);
}

impl core::fmt::Display for Pid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "<{}>", self.0)
    }
}

/// Correlates a yielded command with its completion event.
///
/// The process chooses its tags; the host hands the tag back unchanged in the `YieldComplete`
/// event. Tags only need to be unique among one process's outstanding yields.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tag(pub u64);

impl core::fmt::Display for Tag {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "#{}", self.0)
    }
}
