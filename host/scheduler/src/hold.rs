//! How a process's journal holds a step's effects until it has written the step: [`Hold`],
//! [`Release`], and the [`Note`]s it leaves on the step's yields for their handlers.

use crate::wake::{Turn, Waker, WakerSource};

/// Lets [`Process::journal`](crate::Process::journal) hold a step's effects until its journal
/// has it: see there.
pub struct Hold<'a> {
    pub(crate) turn: &'a dyn Turn,
    pub(crate) held: std::cell::Cell<bool>,
    /// How many of the first yields are dispatched without waiting for the release.
    pub(crate) first: std::cell::Cell<usize>,
    /// What the journal decided about some of the yields, in yield order ([`Hold::note`]).
    pub(crate) notes: std::cell::RefCell<Notes>,
}

/// The journal's notes on a step's yields, by position in the step's output, in order.
pub(crate) type Notes = std::collections::VecDeque<(usize, Note)>;

/// Where [`Worker::dispatch`](crate::worker) finds the note on each yield: a step's notes, or
/// none (the common case: no journal, or one that noted nothing), which costs nothing per yield.
pub(crate) trait NoteSource {
    /// The note on the yield at `position` in the step's output, if the next one is about it.
    fn take(&mut self, position: usize) -> Option<Box<Note>>;
}

impl NoteSource for Notes {
    #[inline]
    fn take(&mut self, position: usize) -> Option<Box<Note>> {
        // Notes of positions passed (a note for a yield past the output) are dropped.
        while self.front().is_some_and(|(noted, _)| *noted < position) {
            self.pop_front();
        }
        match self.front() {
            Some((noted, _)) if *noted == position => {
                self.pop_front().map(|(_, note)| Box::new(note))
            }
            _ => None,
        }
    }
}

/// No notes.
pub(crate) struct NoNotes;

impl NoteSource for NoNotes {
    #[inline(always)]
    fn take(&mut self, _: usize) -> Option<Box<Note>> {
        None
    }
}

/// What a process's journal decided about one of its yields ([`Hold::note`]): it reaches the
/// yield's handler with the yield ([`Request::note`](crate::Request::note)), so the decision
/// travels with what it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// The number the journal gave a message it wrote for its receiver.
    Numbered(u64),
    /// The pid the journal reserved for a child it wrote, the name it wrote it under, and the
    /// module it wrote it to run (as the spawner names modules: a content hash), which the
    /// child must run whatever a name means by the time it starts.
    Child(crate::Pid, std::sync::Arc<str>, std::sync::Arc<str>),
    /// The yield was made before a restart and is made again: what it did then may stand.
    Again,
}

impl std::fmt::Debug for Hold<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("pid", &self.turn.pid())
            .field("held", &self.held.get())
            .finish()
    }
}

impl Hold<'_> {
    /// Holds this step's yields and status until the returned [`Release`] is released.
    pub fn hold(&self) -> Release {
        self.held.set(true);
        Release {
            waker: WakerSource { turn: self.turn }.waker(),
        }
    }

    /// Dispatches the step's first `count` yields (in the output given to
    /// [`Process::journal`](crate::Process::journal)) as soon as `journal` returns, without waiting
    /// for the release, when the step is held; the rest wait for it. Only a leading run of yields
    /// can go, so a step's yields still take effect in the order it made them. For effects that
    /// stay inside the journal: a durable host delivers a message to another journaled workflow at
    /// once, because whatever the receiver does with it is journaled after the sender's step, so no
    /// crash can keep the one and lose the other.
    pub fn dispatch_first(&self, count: usize) {
        self.first.set(count);
    }

    /// Hands `note` to the handler of the yield at `index` in this step's output (as given to
    /// [`Process::journal`](crate::Process::journal)) with the yield, whether the step is held or
    /// not. Notes are given in the order of the yields they are about. By position, not tag: a
    /// guest that repeats a tag cannot move a note onto another yield.
    pub fn note(&self, index: usize, note: Note) {
        self.notes.borrow_mut().push_back((index, note));
    }
}

/// Lets a held step go on (see [`Process::journal`](crate::Process::journal)), from any thread.
/// Dropping it unreleased leaves the process parked until it is terminated or the scheduler stops:
/// what a host does when its journal cannot be written.
#[must_use = "a held step that is never released leaves its process parked"]
pub struct Release {
    waker: Waker,
}

impl std::fmt::Debug for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Release").finish_non_exhaustive()
    }
}

impl Release {
    /// The step's yields are dispatched and its status acted on, at the process's next turn.
    pub fn release(self) {
        if let Some(scheduler) = self.waker.scheduler() {
            scheduler.release(self.waker.pid());
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{NoNotes, Note, NoteSource, Notes};

    #[test]
    fn notes_go_to_the_yield_at_their_position() {
        let mut notes: Notes = [
            (1, Note::Numbered(10)),
            (3, Note::Again),
            (5, Note::Numbered(12)),
        ]
        .into_iter()
        .collect();
        assert_eq!(notes.take(0), None);
        assert_eq!(notes.take(1), Some(Box::new(Note::Numbered(10))));
        assert_eq!(notes.take(2), None);
        // A position skipped (past the output) drops its note; the next is still found.
        assert_eq!(notes.take(4), None);
        assert_eq!(notes.take(5), Some(Box::new(Note::Numbered(12))));
        assert!(notes.is_empty());
        assert_eq!(NoNotes.take(1), None);
    }
}
