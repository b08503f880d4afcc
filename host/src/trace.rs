//! Traces: OpenTelemetry spans of what durable workflows do, given a tracer
//! ([`HostBuilder::tracer`](crate::HostBuilder::tracer); `wfhost serve --otlp-endpoint` exports
//! them over OTLP).
//!
//! - **A run** (`run ENTRY`): from the workflow's start, or from the moment this host took it up
//!   after a restart (`wfhost.resumed`), to its end. Its parent is what the start named (an HTTP
//!   request's span, with a `traceparent` of the caller's own as that one's parent; the spawning
//!   workflow's run for a child), kept in the store with the start, so that the runs of one
//!   workflow on any host, before and after restarts, are in one trace.
//! - **A step** (`step`): each step it takes live (a replay after a restart is none).
//! - **A call** (`call NAME`): a host function, an HTTP request (`wfhost.http`, which sends the
//!   call's `traceparent`), or a worker's task (the worker is handed the `traceparent`).
//!
//! Nothing here reaches a guest: a span is the host's record of what it did, never an input.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::global::{BoxedSpan, BoxedTracer, ObjectSafeTracer};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use parking_lot::RwLock;
use wfcontract::Pid;

/// The [W3C Trace Context](https://www.w3.org/TR/trace-context/) `traceparent` of `span`:
/// `00-<trace id>-<span id>-<flags>`.
pub fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// The span a W3C `traceparent` header names (as a remote parent), or `None` if it is not one:
/// version `00` (or a later one, read as `00` says), a trace id and a span id not all zeros,
/// lowercase hex.
pub fn parse_traceparent(header: &str) -> Option<SpanContext> {
    let header = header.trim();
    let mut parts = header.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2) || version == "ff" || !lower_hex(flags, 2) {
        return None;
    }
    // Version 00 has exactly four fields; a later version may add some.
    if version == "00" && parts.next().is_some() {
        return None;
    }
    if !lower_hex(trace, 32) || !lower_hex(span, 16) {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace,
        span,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// A context whose span is `parent` (a `traceparent`), or an empty one (no valid parent: the
/// span started in it is a trace's root).
pub(crate) fn remote(parent: Option<&str>) -> Context {
    match parent.and_then(parse_traceparent) {
        Some(span) => Context::new().with_remote_span_context(span),
        None => Context::new(),
    }
}

/// The host's tracer, and the runs of the workflows it runs, for their calls' spans.
pub(crate) struct Traces {
    tracer: BoxedTracer,
    runs: RwLock<HashMap<Pid, Context>>,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").finish_non_exhaustive()
    }
}

/// A workflow's run on this host, as a span: started at its first live step here (a workflow
/// that only waits here, or that the host refuses, has none), ended with the workflow or when
/// the host lets it go.
pub(crate) struct RunSpan {
    /// The span the run is a child of (a `traceparent`), as the store keeps it.
    parent: Option<Box<str>>,
    entry: Box<str>,
    /// When the workflow started, in milliseconds since the Unix epoch: its first run's span
    /// starts then.
    started: Option<u64>,
    /// Taken up after a restart, or from another host: its span starts when it is.
    resumed: bool,
    span: Option<Context>,
}

impl RunSpan {
    pub(crate) fn new(
        parent: Option<&str>,
        entry: &str,
        (started, resumed): (Option<u64>, bool),
    ) -> RunSpan {
        RunSpan {
            parent: parent.map(Box::from),
            entry: Box::from(entry),
            started,
            resumed,
            span: None,
        }
    }

    /// Its span, started now (and noted as `pid`'s, for its calls) if it has none yet.
    pub(crate) fn live(&mut self, traces: &Traces, pid: Pid) -> &Context {
        if self.span.is_none() {
            let mut builder = traces
                .tracer
                .span_builder(format!("run {}", self.entry))
                .with_kind(SpanKind::Internal);
            let start = self
                .started
                .filter(|_| !self.resumed)
                .and_then(|ms| SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms)));
            if let Some(start) = start {
                builder = builder.with_start_time(start);
            }
            let span = builder.start_with_context(&traces.tracer, &remote(self.parent.as_deref()));
            let run = Context::new().with_span(span);
            traces.runs.write().insert(pid, run.clone());
            self.span = Some(run);
        }
        self.span.get_or_insert_with(Context::new)
    }

    /// The `traceparent` of its span, once it has one.
    pub(crate) fn traceparent(&self) -> Option<String> {
        self.span.as_ref().and_then(run_traceparent)
    }

    /// Ends its span, if it has one, saying what it ran (`id`, `module`): the workflow failed
    /// with an error, or ended ok (`Some(None)`); or (`None`) the run goes on later or elsewhere
    /// (`wfhost.left`: the host stopped, or let the workflow go), a new span's.
    pub(crate) fn end(
        &mut self,
        traces: &Traces,
        (pid, id, module): (Pid, &str, &str),
        outcome: Option<Option<&str>>,
    ) {
        let Some(run) = self.span.take() else {
            return;
        };
        traces.runs.write().remove(&pid);
        let span = run.span();
        span.set_attribute(KeyValue::new("wfhost.workflow.id", id.to_string()));
        span.set_attribute(KeyValue::new("wfhost.entry", self.entry.to_string()));
        span.set_attribute(KeyValue::new("wfhost.module", module.to_string()));
        if self.resumed {
            span.set_attribute(KeyValue::new("wfhost.resumed", true));
        }
        match outcome {
            Some(Some(error)) => span.set_status(Status::error(capped(error))),
            Some(None) => span.set_status(Status::Ok),
            None => span.set_attribute(KeyValue::new("wfhost.left", true)),
        }
        span.end();
    }
}

/// A span's error message: `message`, cut to at most [`MAX_MESSAGE`] bytes (`...` ends a cut
/// one).
fn capped(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The most of an error's message a span keeps.
pub const MAX_MESSAGE: usize = 256;

impl Traces {
    pub(crate) fn new(tracer: Box<dyn ObjectSafeTracer + Send + Sync>) -> Arc<Traces> {
        Arc::new(Traces {
            tracer: BoxedTracer::new(tracer),
            runs: RwLock::new(HashMap::new()),
        })
    }

    /// The `traceparent` of `pid`'s run's span, if it runs here traced.
    pub(crate) fn traceparent_of(&self, pid: Pid) -> Option<String> {
        self.runs.read().get(&pid).and_then(run_traceparent)
    }

    /// Starts the span of one step of the workflow whose run is `run`, its `seq`th.
    pub(crate) fn step(&self, run: &Context, seq: u64, events: usize) -> BoxedSpan {
        self.tracer
            .span_builder("step")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("wfhost.step", seq as i64),
                KeyValue::new("wfhost.events", events as i64),
            ])
            .start_with_context(&self.tracer, run)
    }

    /// Starts the span of call `name` (attempt `attempt`, key `key`) by `pid`, if it runs here
    /// and is traced: the span, with its `traceparent` for what serves the call.
    pub(crate) fn call(
        &self,
        pid: Pid,
        name: &str,
        attempt: u32,
        key: Option<&str>,
    ) -> Option<(BoxedSpan, String)> {
        let run = self.runs.read().get(&pid).cloned()?;
        let kind = if name == wfcontract::builtin::HTTP_FUNCTION {
            SpanKind::Client
        } else {
            SpanKind::Internal
        };
        let mut attributes = vec![
            KeyValue::new("wfhost.function", name.to_string()),
            KeyValue::new("wfhost.attempt", i64::from(attempt)),
        ];
        if let Some(key) = key {
            attributes.push(KeyValue::new("wfhost.idempotency_key", key.to_string()));
        }
        let span = self
            .tracer
            .span_builder(format!("call {name}"))
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &run);
        let parent = traceparent(span.span_context());
        Some((span, parent))
    }
}

/// Ends `span` as an outcome says: an error's status and message, or ok.
pub(crate) fn end<E: std::fmt::Display>(
    mut span: impl opentelemetry::trace::Span,
    error: Option<E>,
) {
    match error {
        Some(error) => span.set_status(Status::error(capped(&error.to_string()))),
        None => span.set_status(Status::Ok),
    }
    span.end();
}

/// Ends the span of a step that answered `out`, or failed with `error`.
pub(crate) fn end_step<E: std::fmt::Display>(
    mut span: BoxedSpan,
    out: &wfcontract::StepOutput,
    error: Option<E>,
) {
    if error.is_none() {
        span.set_attribute(KeyValue::new("wfhost.yields", out.yields.len() as i64));
    }
    end(span, error);
}

/// The `traceparent` of run `run`'s span.
pub(crate) fn run_traceparent(run: &Context) -> Option<String> {
    let span = run.span();
    let context = span.span_context();
    context.is_valid().then(|| traceparent(context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_at_a_character_within_its_bytes() {
        assert_eq!(capped("short"), "short");
        let long = "é".repeat(200);
        let cut = capped(&long);
        assert!(
            cut.len() <= MAX_MESSAGE && cut.ends_with("..."),
            "{}",
            cut.len()
        );
        assert!(long.starts_with(cut.trim_end_matches("...")));
    }

    #[test]
    fn a_traceparent_is_read_as_the_w3c_format_says() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let span = parse_traceparent(header).unwrap();
        assert_eq!(
            span.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            span.span_id(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert!(span.is_sampled());
        assert!(span.is_remote());
        assert_eq!(traceparent(&span), header);
        let unsampled =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().is_sampled());
        // A later version may add fields; version 00 may not.
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                .is_some()
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }
}
