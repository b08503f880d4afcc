//! One run: the hosts on a store, the operations a seeded generator picks (starts, messages,
//! cancels, pauses, upgrades, prunes, a worker's polls and completions, readers beside the
//! hosts) and the faults between them (clean restarts, `kill -9`, a kill in the middle of a
//! request, and on PostgreSQL a host frozen past its lease while the other goes on), each
//! answer recorded in the [`History`].

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use wfhost_client::wire::{PruneRequest, StartRequest, TaskJson};

use crate::history::{Ack, History, Kind, Workflow};
use crate::host::{Host, Launcher, FUNCTION, LEASE};

/// What an answer of the API means for the operation that asked.
pub(crate) enum Answer<T> {
    /// It happened.
    Done(T),
    /// It was refused (a 4xx): it did not happen. With the status.
    Refused(u16, String),
    /// No answer, or a server error: it may have happened.
    Unknown,
}

impl<T> From<wfhost_client::Result<T>> for Answer<T> {
    fn from(result: wfhost_client::Result<T>) -> Answer<T> {
        match result {
            Ok(value) => Answer::Done(value),
            Err(error) => match error.status() {
                Some(status) if (400..500).contains(&status) && status != 408 => {
                    Answer::Refused(status, error.to_string())
                }
                _ => Answer::Unknown,
            },
        }
    }
}

/// The hosts, the module the workflows run, and the run's record.
pub(crate) struct World {
    pub(crate) launcher: Launcher,
    pub(crate) hosts: Vec<Host>,
    /// Whether hosts share the store (PostgreSQL): then there are two, and one may be frozen.
    pub(crate) shared: bool,
    pub(crate) rng: fastrand::Rng,
    pub(crate) history: History,
    /// The probe module's hash, and builds of it with other hashes (upgrade targets).
    pub(crate) module: String,
    pub(crate) builds: Vec<String>,
    /// Tasks the worker holds, not completed yet.
    held: Vec<TaskJson>,
    /// When a frozen host is thawed.
    thaw_at: Option<(usize, Instant)>,
    next_id: u64,
    next_value: u64,
    next_answer: u64,
}

impl World {
    /// Hosts on `store` (two if `shared`), with the probe module and two other builds of it
    /// in the store.
    pub(crate) fn new(
        wfhost: &Path,
        store: &str,
        dir: &Path,
        shared: bool,
        seed: u64,
    ) -> Result<World, String> {
        let mut launcher = Launcher::new(wfhost, store, dir);
        let mut hosts = vec![launcher.start()?];
        if shared {
            hosts.push(launcher.start()?);
        }
        let client = hosts[0].client();
        let probe = std::fs::read(wfhost_test_programs::PROBE).map_err(|e| e.to_string())?;
        let module = client.put_module(&probe).map_err(|e| e.to_string())?.0.hash;
        let builds = (1..=2)
            .map(|n| {
                client
                    .put_module(&wfhost_test_programs::variant(&probe, n))
                    .map(|(m, _)| m.hash)
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(World {
            launcher,
            hosts,
            shared,
            rng: fastrand::Rng::with_seed(seed),
            history: History {
                shared,
                ..History::default()
            },
            module,
            builds,
            held: Vec::new(),
            thaw_at: None,
            next_id: 0,
            next_value: 0,
            next_answer: 0,
        })
    }

    /// Stores the probe module again.
    fn store_module(&mut self) -> Result<(), String> {
        let probe = std::fs::read(wfhost_test_programs::PROBE).map_err(|e| e.to_string())?;
        let stored = self
            .client()
            .put_module(&probe)
            .map_err(|e| e.to_string())?;
        self.history.count("store module", Ack::Yes);
        if stored.0.hash != self.module {
            return Err(format!(
                "the probe module's hash changed: {}",
                stored.0.hash
            ));
        }
        Ok(())
    }

    /// A client of a host that answers (not frozen), picked at random.
    pub(crate) fn client(&mut self) -> wfhost_client::Client {
        let live: Vec<usize> = (0..self.hosts.len())
            .filter(|&i| !self.hosts[i].frozen)
            .collect();
        let at = live[self.rng.usize(..live.len())];
        self.hosts[at].client()
    }

    /// One operation or fault, chosen by the seed.
    pub(crate) fn step(&mut self) -> Result<(), String> {
        self.thaw_if_due();
        let roll = self.rng.u32(..100);
        let messages = self.rng.u32(1..4);
        match roll {
            0..=13 => self.start(Kind::Collect(messages)),
            14..=19 => self.start(Kind::Call),
            20..=41 => self.send(),
            42..=44 => self.cancel(),
            45..=48 => self.pause(),
            49..=52 => self.work(),
            53..=60 => self.complete_held(),
            61..=66 => self.read_beside(),
            67..=68 => self.prune(),
            69..=71 => self.upgrade(),
            72..=75 => self.restart(),
            76..=80 => self.kill(),
            81..=84 => self.kill_in_flight(),
            85..=88 if self.shared => self.freeze(),
            _ => self.send(),
        }
    }

    fn new_id(&mut self) -> String {
        self.next_id += 1;
        format!("w{}", self.next_id)
    }

    /// Ids of workflows started (or maybe started) and not pruned, of `kind` if given.
    fn ids(&self, filter: impl Fn(&Workflow) -> bool) -> Vec<String> {
        self.history
            .workflows
            .iter()
            .filter(|(_, w)| !w.pruned && filter(w))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn pick(&mut self, filter: impl Fn(&Workflow) -> bool) -> Option<String> {
        let ids = self.ids(filter);
        (!ids.is_empty()).then(|| ids[self.rng.usize(..ids.len())].clone())
    }

    /// A refusal of an operation on a workflow whose start was acknowledged, saying it does
    /// not exist, is a lost workflow.
    fn refused(&mut self, id: &str, status: u16, why: &str) {
        let acked = self
            .history
            .workflows
            .get(id)
            .is_some_and(|w| w.start == Ack::Yes && !w.pruned);
        if status == 404 && acked && why.contains("no workflow") {
            self.history.violation(format!(
                "workflow {id}, whose start was acknowledged, is not found: {why}"
            ));
        }
    }

    fn start(&mut self, kind: Kind) -> Result<(), String> {
        let id = self.new_id();
        let (entry, input) = match kind {
            Kind::Collect(n) => ("collect", json!(n)),
            Kind::Call => ("call", json!([FUNCTION, id])),
        };
        let request = StartRequest {
            id: Some(id.clone()),
            module: self.module.clone(),
            entry: entry.to_string(),
            input: serde_json::value::to_raw_value(&input).map_err(|e| e.to_string())?,
        };
        let mut answer = Answer::from(self.client().start(&request));
        if matches!(&answer, Answer::Refused(404, why) if why.contains("store it first")) {
            // A prune removed the module (no workflow used it): a client stores it again, as
            // the answer says, and starts.
            self.store_module()?;
            answer = Answer::from(self.client().start(&request));
        }
        let ack = match answer {
            Answer::Done(_) => Ack::Yes,
            Answer::Refused(status, why) => {
                self.history
                    .violation(format!("the start of {id} was refused ({status}): {why}"));
                return Ok(());
            }
            Answer::Unknown => Ack::Maybe,
        };
        self.history.count("start", ack);
        self.history
            .workflows
            .insert(id, Workflow::new(kind, &self.module, ack));
        Ok(())
    }

    /// Sends the next unique value to workflow `id`.
    fn send_to(&mut self, id: &str) -> Ack {
        self.next_value += 1;
        let value = self.next_value;
        let message = serde_json::value::to_raw_value(&value).expect("a number is JSON");
        let ack = match Answer::from(self.client().send(id, &message)) {
            Answer::Done(_) => Ack::Yes,
            Answer::Refused(status, why) => {
                self.refused(id, status, &why);
                self.history.count("send", Ack::Maybe);
                return Ack::Maybe;
            }
            Answer::Unknown => Ack::Maybe,
        };
        self.history.count("send", ack);
        if let Some(workflow) = self.history.workflows.get_mut(id) {
            workflow.sends.push((value, ack));
        }
        ack
    }

    fn send(&mut self) -> Result<(), String> {
        if let Some(id) = self.pick(|w| matches!(w.kind, Kind::Collect(_))) {
            self.send_to(&id);
        }
        Ok(())
    }

    fn cancel(&mut self) -> Result<(), String> {
        let Some(id) = self.pick(|w| w.cancel.is_none()) else {
            return Ok(());
        };
        let ack = match Answer::from(self.client().cancel(&id)) {
            Answer::Done(_) => Ack::Yes,
            Answer::Refused(status, why) => {
                self.refused(&id, status, &why);
                return Ok(());
            }
            Answer::Unknown => Ack::Maybe,
        };
        self.history.count("cancel", ack);
        if let Some(workflow) = self.history.workflows.get_mut(&id) {
            workflow.cancel = Some(ack);
        }
        Ok(())
    }

    fn pause(&mut self) -> Result<(), String> {
        let Some(id) = self.pick(|_| true) else {
            return Ok(());
        };
        let pause = self.rng.bool();
        let client = self.client();
        let answer = if pause {
            client.pause(&id)
        } else {
            client.unpause(&id)
        };
        let ack = match Answer::from(answer) {
            // Ended already: nothing holds it.
            Answer::Done(change) if change.pause == "ended" => return Ok(()),
            Answer::Done(_) => Ack::Yes,
            Answer::Refused(status, why) => {
                self.refused(&id, status, &why);
                return Ok(());
            }
            Answer::Unknown => Ack::Maybe,
        };
        self.history
            .count(if pause { "pause" } else { "unpause" }, ack);
        if let Some(workflow) = self.history.workflows.get_mut(&id) {
            workflow.paused = Some((pause, ack));
        }
        Ok(())
    }

    /// The worker takes a task, if one waits.
    fn work(&mut self) -> Result<(), String> {
        let functions = [FUNCTION.to_string()];
        match Answer::from(self.client().poll_task(&functions, Duration::ZERO)) {
            Answer::Done(Some(task)) => {
                self.history.count("poll", Ack::Yes);
                self.held.push(task);
            }
            Answer::Done(None) => self.history.count("poll", Ack::Yes),
            Answer::Refused(..) | Answer::Unknown => self.history.count("poll", Ack::Maybe),
        }
        Ok(())
    }

    /// The worker completes a task it holds (each delivery with an answer of its own), or
    /// gives it up (it goes to another poll after its deadline).
    fn complete_held(&mut self) -> Result<(), String> {
        if self.held.is_empty() {
            return self.work();
        }
        let task = self.held.swap_remove(self.rng.usize(..self.held.len()));
        if self.rng.u32(..10) == 0 {
            self.history.count("abandon", Ack::Yes);
            return Ok(());
        }
        self.complete(task);
        Ok(())
    }

    fn complete(&mut self, task: TaskJson) {
        self.next_answer += 1;
        let answer = format!("answer-{}", self.next_answer);
        let completion = wfhost_client::wire::CompleteRequest {
            result: Some(serde_json::value::to_raw_value(&answer).expect("a string is JSON")),
            error: None,
            next: None,
        };
        let ack = match Answer::from(self.client().complete_task(&task.task, &completion)) {
            Answer::Done(()) => Ack::Yes,
            // Moved on, or unknown: refused, so never applied.
            Answer::Refused(..) => {
                self.history.count("complete", Ack::Maybe);
                return;
            }
            Answer::Unknown => Ack::Maybe,
        };
        self.history.count("complete", ack);
        if let Some(key) = task.idempotency_key {
            self.history
                .completions
                .entry(key)
                .or_default()
                .push(crate::history::Completion { answer, ack });
        }
    }

    /// A read-only command beside the hosts, on the store itself.
    fn read_beside(&mut self) -> Result<(), String> {
        let store = self.launcher.store.clone();
        let copy = self
            .launcher
            .dir
            .join(format!("copy-{}.db", self.rng.u64(..)));
        let some_id = self.pick(|w| w.start == Ack::Yes);
        let mut args: Vec<String> = match (self.rng.u32(..4), &some_id) {
            (0, Some(id)) => vec!["status".into(), id.clone()],
            (1, Some(id)) => vec!["history".into(), id.clone()],
            (2, _) if !self.shared => vec!["backup".into(), copy.display().to_string()],
            _ => vec!["list".into()],
        };
        args.extend(["--store".to_string(), store]);
        let output = self
            .launcher
            .command()
            .args(&args)
            .output()
            .map_err(|e| e.to_string())?;
        let said = String::from_utf8_lossy(&output.stderr).into_owned();
        // A workflow pruned meanwhile is not found; anything else is the reader's failure.
        let gone = said.contains("no workflow");
        self.history.count("read", Ack::Yes);
        if !output.status.success() && !gone {
            self.history
                .violation(format!("wfhost {args:?} beside the hosts failed: {said}"));
        }
        let _ = std::fs::remove_file(&copy);
        Ok(())
    }

    /// Removes finished workflows, after checking each as it ended.
    fn prune(&mut self) -> Result<(), String> {
        let before = now_ms().saturating_sub(1);
        let present = crate::check::everything(&self.client())?;
        let ended: Vec<_> = present
            .iter()
            .filter(|(_, w)| w.is_finished())
            .map(|(id, w)| (id.clone(), w.clone()))
            .collect();
        let request = PruneRequest {
            finished_before: Some(before),
            ..PruneRequest::default()
        };
        match Answer::from(self.client().prune(&request)) {
            Answer::Done(pruned) => {
                self.history.count("prune", Ack::Yes);
                let _ = pruned;
                self.checked_for_prune(ended, before);
            }
            // Unanswered, it may have removed them: they were checked as they ended.
            _ => {
                self.history.count("prune", Ack::Maybe);
                self.checked_for_prune(ended, before);
            }
        }
        // A workflow the listing showed running, whose end was committed after it with an end
        // time before the cutoff (a host stamps the end when its step ran, and commits it with
        // the next group), may have been removed unchecked: one the listing showed unfinished
        // and gone now is taken as pruned. One the listing did not show at all is still checked.
        let now = crate::check::everything(&self.client())?;
        for (id, workflow) in self.history.workflows.iter_mut() {
            let was_running = present.get(id).is_some_and(|w| !w.is_finished());
            if !workflow.pruned && was_running && !now.contains_key(id) {
                workflow.pruned = true;
            }
        }
        Ok(())
    }

    /// Checks each of `ended` that finished before the prune's cutoff, which it may remove (all
    /// of them, or, cut short, some): each may be absent from then on.
    fn checked_for_prune(
        &mut self,
        ended: Vec<(String, wfhost_client::wire::WorkflowJson)>,
        before: u64,
    ) {
        for (id, workflow) in ended {
            if workflow.finished.is_some_and(|f| f < before) {
                crate::check::workflow(&mut self.history, &id, Some(&workflow));
                if let Some(w) = self.history.workflows.get_mut(&id) {
                    w.pruned = true;
                }
            }
        }
    }

    /// Upgrades a running workflow to another build of its module (the same code).
    fn upgrade(&mut self) -> Result<(), String> {
        let Some(id) = self.pick(|w| w.cancel.is_none()) else {
            return Ok(());
        };
        let to = self.builds[self.rng.usize(..self.builds.len())].clone();
        let ack = match Answer::from(self.client().upgrade(&id, &to)) {
            Answer::Done(_) => Ack::Yes,
            // Ended, or another upgrade under way: nothing changed.
            Answer::Refused(status, why) => {
                self.refused(&id, status, &why);
                return Ok(());
            }
            Answer::Unknown => Ack::Maybe,
        };
        self.history.count("upgrade", ack);
        if let Some(workflow) = self.history.workflows.get_mut(&id) {
            workflow.upgrades.push((to, ack));
        }
        Ok(())
    }

    fn host_to_fault(&mut self) -> usize {
        self.rng.usize(..self.hosts.len())
    }

    /// Stops a host cleanly and starts it again.
    fn restart(&mut self) -> Result<(), String> {
        let at = self.host_to_fault();
        self.hosts[at].stop()?;
        self.history.fault("clean restart");
        self.hosts[at] = self.launcher.start()?;
        Ok(())
    }

    /// Kills a host (`kill -9`) and starts it again.
    fn kill(&mut self) -> Result<(), String> {
        let at = self.host_to_fault();
        self.hosts[at].kill();
        self.history.fault("kill -9");
        self.hosts[at] = self.launcher.start()?;
        Ok(())
    }

    /// Kills a host while a request to it is on the way, a few milliseconds in, then starts it
    /// again: the request's fate is unknown.
    fn kill_in_flight(&mut self) -> Result<(), String> {
        let at = self.host_to_fault();
        if self.hosts[at].frozen {
            return Ok(());
        }
        let delay = Duration::from_micros(self.rng.u64(0..20_000));
        let victim = self.hosts[at].pid();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            if let Some(pid) = victim {
                // SAFETY: a signal to a child process of this run's, which has not been waited
                // for yet (the main thread waits for it only after this thread is joined).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        });
        // The request goes to that host.
        let client = self.hosts[at].client();
        match self.rng.u32(..3) {
            0 => {
                let kind = Kind::Collect(self.rng.u32(1..4));
                let id = self.new_id();
                let request = StartRequest {
                    id: Some(id.clone()),
                    module: self.module.clone(),
                    entry: "collect".into(),
                    input: serde_json::value::to_raw_value(&json!(match kind {
                        Kind::Collect(n) => n,
                        Kind::Call => 1,
                    }))
                    .map_err(|e| e.to_string())?,
                };
                let ack = match Answer::from(client.start(&request)) {
                    Answer::Done(_) => Ack::Yes,
                    _ => Ack::Maybe,
                };
                self.history.count("start", ack);
                self.history
                    .workflows
                    .insert(id, Workflow::new(kind, &self.module, ack));
            }
            _ => {
                if let Some(id) = self.pick(|w| matches!(w.kind, Kind::Collect(_))) {
                    self.next_value += 1;
                    let value = self.next_value;
                    let message = serde_json::value::to_raw_value(&value).expect("a number");
                    let ack = match Answer::from(client.send(&id, &message)) {
                        Answer::Done(_) => Ack::Yes,
                        _ => Ack::Maybe,
                    };
                    self.history.count("send", ack);
                    if let Some(w) = self.history.workflows.get_mut(&id) {
                        w.sends.push((value, ack));
                    }
                }
            }
        }
        let _ = killer.join();
        self.hosts[at].kill();
        self.history.fault("kill -9 mid-request");
        self.hosts[at] = self.launcher.start()?;
        Ok(())
    }

    /// Freezes a host past its lease (SIGSTOP): the other takes its workflows over; it is
    /// thawed a while later, and must not undo what the other did.
    fn freeze(&mut self) -> Result<(), String> {
        if self.thaw_at.is_some() {
            return Ok(());
        }
        let at = self.host_to_fault();
        self.hosts[at].freeze();
        self.history.fault("frozen past its lease");
        self.thaw_at = Some((at, Instant::now() + LEASE * 2));
        Ok(())
    }

    fn thaw_if_due(&mut self) {
        if let Some((at, when)) = self.thaw_at {
            if Instant::now() >= when {
                self.hosts[at].thaw();
                self.thaw_at = None;
            }
        }
    }

    /// Thaws every host and starts again any that exited.
    pub(crate) fn settle(&mut self) -> Result<(), String> {
        if let Some((at, _)) = self.thaw_at.take() {
            self.hosts[at].thaw();
        }
        for at in 0..self.hosts.len() {
            if self.hosts[at].exited() {
                self.hosts[at] = self.launcher.start()?;
            }
        }
        Ok(())
    }

    /// The worker takes and completes every task that waits, until none comes in `quiet`.
    pub(crate) fn drain_tasks(&mut self, quiet: Duration) {
        for task in std::mem::take(&mut self.held) {
            self.complete(task);
        }
        let functions = [FUNCTION.to_string()];
        loop {
            let task = self.client().poll_task(&functions, quiet);
            match task {
                Ok(Some(task)) => self.complete(task),
                _ => return,
            }
        }
    }

    /// Sends each unfinished `collect` workflow as many messages as it takes, so that every one
    /// can end.
    pub(crate) fn top_up(&mut self, unfinished: &[String]) {
        for id in unfinished {
            let Some(workflow) = self.history.workflows.get(id) else {
                continue;
            };
            if let Kind::Collect(n) = workflow.kind {
                for _ in 0..n {
                    self.send_to(id);
                }
            }
        }
    }

    /// Unpauses every workflow a pause may hold.
    pub(crate) fn unpause_all(&mut self) {
        // Every one a pause or unpause was sent to: an unanswered unpause may not have landed.
        let held: Vec<String> = self.ids(|w| w.paused.is_some());
        for id in held {
            let answer = Answer::from(self.client().unpause(&id));
            let ack = match answer {
                Answer::Done(_) => Ack::Yes,
                _ => Ack::Maybe,
            };
            if let Some(workflow) = self.history.workflows.get_mut(&id) {
                workflow.paused = Some((false, ack));
            }
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
