//! Calls to host functions, tried again under a retry policy. The first attempt is sent when the
//! call is made (so calls made together go out in one step); a failure the policy retries is
//! followed by a durable sleep and another attempt, each an ordinary command in the journal, so
//! a host that restarts mid-backoff resumes the same schedule and the history shows every attempt
//! with its error.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use wfcontract::builtin::RETRY_POLICY_FUNCTION;
use wfcontract::{CallRequest, Command, CommandError, Payload, RetryPolicy, RetryRequest, Tag};

use crate::runtime::CommandFuture;
use crate::{Ctx, Error};

/// Which policy a call follows.
#[derive(Clone, Debug)]
pub(crate) enum Policy {
    /// The one the caller gave.
    Given(RetryPolicy),
    /// The host's default for the function, asked for at the first failure (none: no retries).
    Host,
}

type Retrying = Pin<Box<dyn Future<Output = Result<Payload, Error>>>>;

enum Stage {
    First(CommandFuture<Payload>),
    Retrying(Retrying),
    Done,
}

/// A host-function call in flight, with its retries: awaiting it gives the last attempt's
/// outcome. Dropping it abandons the call (and any retries not yet made).
#[must_use = "the call is sent either way; await it for its result"]
pub struct CallFuture<O> {
    ctx: Ctx,
    name: Rc<str>,
    /// The input, for the attempts after the first.
    input: Payload,
    policy: Policy,
    stage: Stage,
    output: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for CallFuture<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallFuture")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn payload(payload: Payload) -> Result<Payload, Error> {
    Ok(payload)
}

/// One attempt at calling `name`.
fn attempt(ctx: &Ctx, name: &str, input: Payload) -> CommandFuture<Payload> {
    let command = Command::Call(CallRequest {
        name: name.to_string(),
        input,
    });
    CommandFuture::new(&ctx.state, command, payload)
}

/// Attempt `number` at the call first made with tag `first`: the host gives it the first
/// attempt's idempotency key, so a service does the call's effect once however many attempts
/// it takes.
fn attempt_again(
    ctx: &Ctx,
    name: &str,
    input: Payload,
    first: Tag,
    number: u32,
) -> CommandFuture<Payload> {
    let command = Command::Retry(RetryRequest {
        first,
        attempt: number,
        call: CallRequest {
            name: name.to_string(),
            input,
        },
    });
    CommandFuture::new(&ctx.state, command, payload)
}

impl<O: DeserializeOwned> CallFuture<O> {
    pub(crate) fn new(
        ctx: &Ctx,
        name: &str,
        input: Result<Payload, Error>,
        policy: Policy,
    ) -> CallFuture<O> {
        let (input, stage) = match input {
            Ok(input) => {
                let first = attempt(ctx, name, input.clone());
                (input, Stage::First(first))
            }
            Err(error) => (
                Payload::empty(),
                Stage::Retrying(Box::pin(std::future::ready(Err(error)))),
            ),
        };
        CallFuture {
            ctx: ctx.clone(),
            name: Rc::from(name),
            input,
            policy,
            stage,
            output: PhantomData,
        }
    }
}

impl<O: DeserializeOwned> Future for CallFuture<O> {
    type Output = Result<O, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            let outcome = match &mut this.stage {
                Stage::First(first) => match Pin::new(&mut *first).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(Error::Command(error))) if may_retry(&this.policy, &error) => {
                        let tag = first.tag();
                        this.stage = Stage::Retrying(Box::pin(retry(
                            this.ctx.clone(),
                            Rc::clone(&this.name),
                            std::mem::replace(&mut this.input, Payload::empty()),
                            this.policy.clone(),
                            (tag, error),
                        )));
                        continue;
                    }
                    Poll::Ready(outcome) => outcome,
                },
                Stage::Retrying(retrying) => match retrying.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(outcome) => outcome,
                },
                Stage::Done => {
                    return Poll::Ready(Err(Error::msg(
                        "a call's future was polled after it finished",
                    )))
                }
            };
            this.stage = Stage::Done;
            return Poll::Ready(outcome.and_then(|payload| payload.decode().map_err(Error::from)));
        }
    }
}

/// Whether `error` may be worth another attempt under `policy` (the host's policy is asked for
/// only then).
fn may_retry(policy: &Policy, error: &CommandError) -> bool {
    match policy {
        Policy::Given(policy) => policy.retries(error.kind),
        Policy::Host => RetryPolicy::never().retries(error.kind),
    }
}

/// The attempts after the first, which failed with `error`.
async fn retry(
    ctx: Ctx,
    name: Rc<str>,
    input: Payload,
    policy: Policy,
    (first, mut error): (Tag, CommandError),
) -> Result<Payload, Error> {
    let policy = match policy {
        Policy::Given(policy) => policy,
        // Asking failed (the host cannot answer now): the call's own error is the outcome.
        Policy::Host => match host_policy(&ctx, &name).await {
            Ok(Some(policy)) => policy,
            Err(Error::Cancelled) => return Err(Error::Cancelled),
            Ok(None) | Err(_) => return Err(error.into()),
        },
    };
    // Measured with the host's clock, which the journal keeps: a replay counts the same.
    let first_failed = match policy.max_elapsed {
        Some(_) => Some(ctx.now().await?),
        None => None,
    };
    let mut attempts = 1;
    loop {
        if !policy.retries(error.kind) {
            return Err(error.into());
        }
        let elapsed = match first_failed {
            Some(first) => elapsed_since(&ctx, first).await?,
            None => Duration::ZERO,
        };
        if !policy.allows_another(attempts, elapsed) {
            error.message = format!(
                "{} (gave up after {attempts} attempt{})",
                error.message,
                if attempts == 1 { "" } else { "s" }
            );
            return Err(error.into());
        }
        ctx.sleep(policy.delay(attempts)).await?;
        attempts += 1;
        match attempt_again(&ctx, &name, input.clone(), first, attempts).await {
            Ok(payload) => return Ok(payload),
            Err(Error::Command(failed)) => error = failed,
            Err(other) => return Err(other),
        }
    }
}

async fn elapsed_since(ctx: &Ctx, first: SystemTime) -> Result<Duration, Error> {
    let now = ctx.now().await?;
    Ok(now.duration_since(first).unwrap_or_default())
}

/// The host's retry policy for function `name`, asked once per process and function.
async fn host_policy(ctx: &Ctx, name: &str) -> Result<Option<RetryPolicy>, Error> {
    if let Some(known) = ctx.state.borrow().policies.get(name) {
        return Ok(known.clone());
    }
    // In the workflow's encoding, so that its history reads.
    let input = Payload::encode(ctx.encoding(), name)?;
    let answer = attempt(ctx, RETRY_POLICY_FUNCTION, input).await?;
    let policy: Option<RetryPolicy> = answer.decode()?;
    ctx.state
        .borrow_mut()
        .policies
        .insert(name.to_string(), policy.clone());
    Ok(policy)
}
