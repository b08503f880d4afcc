//! The requests' spans (OpenTelemetry), when the API is traced ([`Api::tracer`](super::Api::tracer)):
//! one for each admitted request to `/v1/` that changes something, and each read and each
//! worker's completion whose caller traces it (sends a `traceparent`), a child of the request's
//! `traceparent`; a start's workflow runs as the span's child. Workers' polls and heartbeats are
//! none (a worker's idle chatter: the task's own span is the call's), and neither are untraced
//! reads (the web UI's, every 2 seconds a tab) or completions (each would be a trace of its
//! own).

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};

/// The most of a request's path its span keeps.
const MAX_PATH: usize = 512;

/// The `traceparent` of a request's span, in the request's extensions: the parent of the runs
/// of the workflows it starts.
#[derive(Clone, Debug)]
pub(crate) struct Traced(pub(crate) String);

/// A request's span, ended with its response.
pub(crate) struct RequestSpan(BoxedSpan);

impl RequestSpan {
    /// Starts `request`'s span, if it is one of the API's (`/v1/`), and notes it in the
    /// request ([`Traced`]).
    pub(crate) fn start(tracer: &BoxedTracer, request: &mut Request) -> Option<RequestSpan> {
        let path = request.uri().path();
        if !path.starts_with("/v1/") {
            return None;
        }
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map(|route| route.as_str().to_string());
        if matches!(
            route.as_deref(),
            Some("/v1/tasks/poll" | "/v1/tasks/{task}/heartbeat")
        ) {
            return None;
        }
        let method = request.method().as_str().to_string();
        let parent = request
            .headers()
            .get("traceparent")
            .and_then(|value| value.to_str().ok())
            .and_then(wfhost::trace::parse_traceparent);
        let read = matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS");
        if (read || path.starts_with("/v1/tasks/")) && parent.is_none() {
            return None;
        }
        let parent = match parent {
            Some(span) => Context::new().with_remote_span_context(span),
            None => Context::new(),
        };
        let mut path = path.to_string();
        if path.len() > MAX_PATH {
            let mut end = MAX_PATH;
            while !path.is_char_boundary(end) {
                end -= 1;
            }
            path.truncate(end);
        }
        let mut attributes = vec![
            KeyValue::new("http.request.method", method.clone()),
            KeyValue::new("url.path", path),
        ];
        if let Some(route) = &route {
            attributes.push(KeyValue::new("http.route", route.clone()));
        }
        let name = match &route {
            Some(route) => format!("{method} {route}"),
            None => method,
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &parent);
        let context = span.span_context();
        if context.is_valid() {
            let traced = Traced(wfhost::trace::traceparent(context));
            request.extensions_mut().insert(traced);
        }
        Some(RequestSpan(span))
    }

    /// Ends the span with `response`'s status (a server error is the span's error).
    pub(crate) fn end(mut self, response: &Response) {
        let status = response.status();
        self.0.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status.as_u16()),
        ));
        if status.is_server_error() {
            self.0.set_status(Status::error(status.to_string()));
        }
        self.0.end();
    }
}
