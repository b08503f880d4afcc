//! Native test processes, built from closures.
#![allow(dead_code)]

use std::time::Duration;

use wfcontract::{Payload, Pid};
use wfhost_scheduler::{Events, InitContext, Process, ProcessError, StepOutput};

/// What a test process knows about itself.
#[derive(Debug, Default)]
pub struct Env {
    pub pid: Option<Pid>,
    pub parent: Option<Pid>,
    pub method: String,
    pub input: Payload,
    /// True during the first step.
    pub first: bool,
}

type StepFn<S> = Box<dyn FnMut(&mut S, &mut Env, Events<'_>, &mut StepOutput) + Send>;
type CloseFn<S> = Box<dyn FnOnce(&mut S) + Send>;

/// A process whose step is a closure over state `S`.
pub struct Proc<S> {
    state: S,
    env: Env,
    step: StepFn<S>,
    on_close: Option<CloseFn<S>>,
}

impl<S: Send + 'static> Proc<S> {
    pub fn new(
        state: S,
        step: impl FnMut(&mut S, &mut Env, Events<'_>, &mut StepOutput) + Send + 'static,
    ) -> Proc<S> {
        Proc {
            state,
            env: Env::default(),
            step: Box::new(step),
            on_close: None,
        }
    }

    pub fn on_close(mut self, f: impl FnOnce(&mut S) + Send + 'static) -> Proc<S> {
        self.on_close = Some(Box::new(f));
        self
    }
}

impl<S: Send + 'static> Process for Proc<S> {
    fn init(
        &mut self,
        ctx: &InitContext,
        method: &str,
        input: Payload,
    ) -> Result<(), ProcessError> {
        self.env = Env {
            pid: Some(ctx.pid()),
            parent: ctx.parent(),
            method: method.to_string(),
            input,
            first: true,
        };
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        // Test processes take every message unless a step says otherwise.
        out.receive = u32::MAX;
        (self.step)(&mut self.state, &mut self.env, events, out);
        self.env.first = false;
        Ok(())
    }

    fn close(&mut self) {
        if let Some(f) = self.on_close.take() {
            f(&mut self.state);
        }
    }
}

pub fn pc<T: serde::Serialize>(value: &T) -> Payload {
    Payload::to_postcard(value).unwrap()
}

pub fn de<T: serde::de::DeserializeOwned>(payload: &Payload) -> T {
    payload.decode().unwrap()
}

/// Generous bound for "this must finish": a failure detector, not synchronisation.
pub const PATIENCE: Duration = Duration::from_secs(120);
