//! [`Metrics`]: what a host counts, for Prometheus to scrape (`GET /metrics` of the HTTP API,
//! `wfhost run --metrics`), with the `prometheus-client` crate.
//!
//! What happens on every step is counted where it happens, in shards a scrape adds up
//! ([`ShardedHistogram`]); what a host holds (processes, instances, workflows) is read from it
//! when scraped ([`Source`]), so that a host with no scraper pays nothing for it.

mod histogram;
mod names;

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub(crate) use histogram::ShardedHistogram;
pub(crate) use names::{call_outcome, ending_outcome};

/// The content type of [`Metrics::encode`]: OpenMetrics, what Prometheus asks for.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of [`Metrics::encode_text`]: Prometheus' text format, for the tools that
/// read only that (`promtool check metrics`, `curl`).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics of the hosts built with them ([`HostBuilder::metrics`](crate::HostBuilder::metrics)),
/// and of the HTTP API that serves them. Cheap to clone; every clone is the same registry.
///
/// Every name starts with `wfhost_`; durations are in seconds, sizes in bytes; counters end in
/// `_total`. A host that stops and the host built after it (a `wfhost serve` that lost its
/// lease starts again as a new host) count on into the same counters. An application adds its
/// own metrics with [`register`](Self::register).
#[derive(Clone)]
pub struct Metrics {
    pub(crate) core: Arc<Core>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// A label set of one label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Outcome {
    pub(crate) outcome: &'static str,
}

/// Workflows started, by whether they are top-level or spawned.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Kind {
    pub(crate) kind: &'static str,
}

/// A host function call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Call {
    pub(crate) function: Arc<str>,
    pub(crate) outcome: &'static str,
}

/// A host function.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Function {
    pub(crate) function: Arc<str>,
}

/// An HTTP request, by route (the route's pattern, never a workflow's id), method and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Request {
    pub(crate) route: Arc<str>,
    pub(crate) method: Arc<str>,
    pub(crate) status: u16,
}

/// An HTTP route.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Route {
    pub(crate) route: Arc<str>,
}

/// Buckets of a histogram of durations that a person waits for: 100 µs to about 100 s.
fn wait_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

/// What a host holds now, read when scraped.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sample {
    pub(crate) processes: u64,
    pub(crate) hibernated: u64,
    pub(crate) waiting_for_instance: u64,
    pub(crate) live_instances: u64,
    pub(crate) warm_instances: u64,
    pub(crate) steps: u64,
    pub(crate) spawned: u64,
    pub(crate) finished: u64,
    pub(crate) compiles: u64,
    /// Durable: workflows this host runs, those it found damaged, entries waiting for the
    /// journal's writer, and whether the store takes its writes.
    pub(crate) durable: Option<DurableSample>,
}

/// What a durable host holds now.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DurableSample {
    pub(crate) running: u64,
    pub(crate) damaged: u64,
    pub(crate) pending: u64,
    pub(crate) store_up: bool,
    /// On a store hosts share: whether this host's lease holds.
    pub(crate) lease_held: Option<bool>,
}

/// A host, as the metrics read it when scraped.
pub(crate) trait Source: Send + Sync {
    fn sample(&self) -> Sample;
}

/// What the registry's collector reads from: the host's sample, and what hosts before it
/// counted.
#[derive(Default)]
struct Sources {
    current: Option<Weak<dyn Source>>,
    /// The counts of the hosts that came before the current one.
    base: Sample,
    /// The current host's counts at the last look (folded into `base` when it goes).
    last: Sample,
}

/// The metrics themselves.
pub(crate) struct Core {
    registry: Mutex<Registry>,
    sources: Mutex<Sources>,
    pub(crate) step_seconds: ShardedHistogram,
    pub(crate) commit_seconds: ShardedHistogram,
    pub(crate) steps_per_commit: ShardedHistogram,
    pub(crate) commits: Counter,
    pub(crate) commit_failures: Counter,
    pub(crate) started: Family<Kind, Counter>,
    pub(crate) ended: Family<Outcome, Counter>,
    pub(crate) calls: Family<Call, Counter>,
    pub(crate) unserved: Counter,
    pub(crate) call_seconds: Family<Function, Histogram, fn() -> Histogram>,
    pub(crate) renewals: Family<Outcome, Counter>,
    pub(crate) claimed: Counter,
    pub(crate) takeovers: Counter,
    pub(crate) resets: Counter,
    pub(crate) http_requests: Family<Request, Counter>,
    pub(crate) http_seconds: Family<Route, Histogram, fn() -> Histogram>,
    pub(crate) http_connections: Gauge,
    pub(crate) http_waiting: Gauge,
    pub(crate) tasks_waiting: Family<Function, Gauge>,
    pub(crate) task_pollers: Family<Function, Gauge>,
    pub(crate) task_wait_seconds: Family<Function, Histogram, fn() -> Histogram>,
    pub(crate) task_completions: Family<Call, Counter>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Counts a request that a server of this host's API answered: the route it matched (its
    /// pattern, `/v1/workflows/{id}`: a label, so a closed set), its method, its status, and how
    /// long the answer took. For `wfhost-server`, which serves the API; not for applications.
    #[doc(hidden)]
    pub fn http_request(&self, route: &str, method: &str, status: u16, took: std::time::Duration) {
        let route: Arc<str> = Arc::from(route);
        self.core
            .http_requests
            .get_or_create(&Request {
                route: Arc::clone(&route),
                method: Arc::from(method),
                status,
            })
            .inc();
        self.core
            .http_seconds
            .get_or_create(&Route { route })
            .observe(took.as_secs_f64());
    }

    /// The open HTTP connections of a server of this host's API, changed by `change`.
    #[doc(hidden)]
    pub fn http_connections(&self, change: i64) {
        self.core.http_connections.inc_by(change);
    }

    /// The HTTP requests waiting for a workflow (`result?wait=`, `outbox?wait=`), changed by
    /// `change`.
    #[doc(hidden)]
    pub fn http_waiting(&self, change: i64) {
        self.core.http_waiting.inc_by(change);
    }

    /// A task of `function` given to a worker after its call waited `waited` for it. For
    /// `wfhost-server`, which serves the task routes; not for applications.
    #[doc(hidden)]
    pub fn task_delivered(&self, function: &str, waited: std::time::Duration) {
        self.core
            .task_wait_seconds
            .get_or_create(&Function {
                function: Arc::from(function),
            })
            .observe(waited.as_secs_f64());
    }

    /// A worker's completion of a task of `function`: `result`, `error`, or `moved_on` (refused:
    /// the task had gone to another worker). For `wfhost-server`; not for applications.
    #[doc(hidden)]
    pub fn task_completed(&self, function: &str, outcome: &'static str) {
        self.core
            .task_completions
            .get_or_create(&Call {
                function: Arc::from(function),
                outcome,
            })
            .inc();
    }

    /// How many tasks of `function` wait for a worker, and how many workers poll for it, now.
    /// For `wfhost-server`; not for applications.
    #[doc(hidden)]
    pub fn task_levels(&self, function: &str, waiting: u64, pollers: u64) {
        let function = Function {
            function: Arc::from(function),
        };
        let level = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.core
            .tasks_waiting
            .get_or_create(&function)
            .set(level(waiting));
        self.core
            .task_pollers
            .get_or_create(&function)
            .set(level(pollers));
    }

    /// An empty registry with wfhost's metrics in it.
    pub fn new() -> Metrics {
        let core = Arc::new(Core {
            registry: Mutex::new(Registry::default()),
            sources: Mutex::new(Sources::default()),
            step_seconds: ShardedHistogram::seconds(),
            commit_seconds: ShardedHistogram::seconds(),
            steps_per_commit: ShardedHistogram::counts(),
            commits: Counter::default(),
            commit_failures: Counter::default(),
            started: Family::default(),
            ended: Family::default(),
            calls: Family::default(),
            unserved: Counter::default(),
            call_seconds: Family::new_with_constructor(wait_buckets),
            renewals: Family::default(),
            claimed: Counter::default(),
            takeovers: Counter::default(),
            resets: Counter::default(),
            http_requests: Family::default(),
            http_seconds: Family::new_with_constructor(wait_buckets),
            http_connections: Gauge::default(),
            http_waiting: Gauge::default(),
            tasks_waiting: Family::default(),
            task_pollers: Family::default(),
            task_wait_seconds: Family::new_with_constructor(wait_buckets),
            task_completions: Family::default(),
        });
        {
            let mut registry = core.registry.lock();
            let r = &mut *registry;
            r.register(
                "wfhost_workflows_started",
                "Durable workflows started by this host, top-level or spawned by another",
                core.started.clone(),
            );
            r.register(
                "wfhost_workflows_ended",
                "Durable workflows this host ended, by outcome (completed, or the failure's kind)",
                core.ended.clone(),
            );
            r.register(
                "wfhost_journal_commits",
                "Commits of the journal (one transaction and one sync each)",
                core.commits.clone(),
            );
            r.register(
                "wfhost_journal_commit_failures",
                "Commits the store refused (the host takes no more work after the first)",
                core.commit_failures.clone(),
            );
            r.register(
                "wfhost_host_function_calls",
                "Host function calls, by function and outcome",
                core.calls.clone(),
            );
            r.register(
                "wfhost_unserved_calls",
                "Calls of durable workflows to functions this host does not serve, left waiting \
                 for a host that does (GET /v1/workflows/{id}/waits names each)",
                core.unserved.clone(),
            );
            r.register(
                "wfhost_host_function_call_duration_seconds",
                "How long host function calls took, by function",
                core.call_seconds.clone(),
            );
            r.register(
                "wfhost_lease_renewals",
                "Renewals of this host's lease on a store hosts share, by outcome (renewed, lost, \
                 error: the store could not be reached in time)",
                core.renewals.clone(),
            );
            r.register(
                "wfhost_claimed_workflows",
                "Workflows this host claimed on a store hosts share",
                core.claimed.clone(),
            );
            r.register(
                "wfhost_takeovers",
                "Workflows claimed from a host that had owned them (it stopped, or its lease ran \
                 out)",
                core.takeovers.clone(),
            );
            r.register(
                "wfhost_workflow_resets",
                "Finished workflows this host reset to run again from one of their steps",
                core.resets.clone(),
            );
            r.register(
                "wfhost_http_requests",
                "HTTP requests answered, by route, method and status",
                core.http_requests.clone(),
            );
            r.register(
                "wfhost_http_request_duration_seconds",
                "How long HTTP requests took to answer, by route",
                core.http_seconds.clone(),
            );
            r.register(
                "wfhost_http_connections",
                "HTTP connections open",
                core.http_connections.clone(),
            );
            r.register(
                "wfhost_http_waiting_results",
                "HTTP requests waiting (result?wait= for a workflow to end, outbox?wait= for its \
                 message)",
                core.http_waiting.clone(),
            );
            r.register(
                "wfhost_tasks_waiting",
                "Activity tasks waiting for a worker, by function (read when scraped)",
                core.tasks_waiting.clone(),
            );
            r.register(
                "wfhost_task_pollers",
                "Workers that polled this server for a function in the last minute, by function",
                core.task_pollers.clone(),
            );
            r.register(
                "wfhost_task_wait_seconds",
                "How long activity tasks waited for a worker, from the call to the delivery, by \
                 function",
                core.task_wait_seconds.clone(),
            );
            r.register(
                "wfhost_task_completions",
                "Workers' completions of activity tasks, by function and outcome (result, error, \
                 moved_on: refused, the task had gone to another worker)",
                core.task_completions.clone(),
            );
            r.register_collector(Box::new(HostCollector(Arc::downgrade(&core))));
        }
        Metrics { core }
    }

    /// Registers an application's own metric beside wfhost's.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        metric: impl prometheus_client::registry::Metric,
    ) {
        self.core.registry.lock().register(name, help, metric);
    }

    /// Everything, in the OpenMetrics text format ([`OPENMETRICS_CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(8 * 1024);
        let registry = self.core.registry.lock();
        // Writing to a String cannot fail, and every metric here encodes.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &registry) {
            tracing::error!("the metrics could not be encoded: {error}");
        }
        text
    }

    /// Everything, in Prometheus' text format ([`TEXT_CONTENT_TYPE`]): as [`encode`](Self::encode)
    /// writes it, with a counter's help and type under the name its samples have (`_total`),
    /// and without OpenMetrics' unit and end-of-file lines.
    pub fn encode_text(&self) -> String {
        names::to_text_format(&self.encode())
    }

    /// The host the gauges read from from now on; the counts of the one before are kept.
    pub(crate) fn attach(&self, source: Weak<dyn Source>) {
        let mut sources = self.core.sources.lock();
        let last = sources.last;
        sources.base.steps += last.steps;
        sources.base.spawned += last.spawned;
        sources.base.finished += last.finished;
        sources.base.compiles += last.compiles;
        sources.last = Sample::default();
        sources.current = Some(source);
    }

    /// Takes the host's final counts before it goes.
    pub(crate) fn detach(&self, source: &dyn Source) {
        let sample = source.sample();
        let mut sources = self.core.sources.lock();
        sources.last = sample;
        sources.last.durable = None;
    }
}

impl Core {
    /// The host's sample now, its counters continuing those of the hosts before it.
    fn sample(&self) -> Sample {
        let mut sources = self.sources.lock();
        let current = sources.current.as_ref().and_then(Weak::upgrade);
        let mut sample = match current {
            Some(source) => {
                let sample = source.sample();
                sources.last = sample;
                sample
            }
            None => Sample {
                durable: None,
                ..sources.last
            },
        };
        sample.steps += sources.base.steps;
        sample.spawned += sources.base.spawned;
        sample.finished += sources.base.finished;
        sample.compiles += sources.base.compiles;
        sample
    }
}

/// Reads the host and the sharded histograms when scraped.
#[derive(Debug)]
struct HostCollector(Weak<Core>);

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: &ShardedHistogram,
) -> std::fmt::Result {
    metric.encode(encoder.encode_descriptor(name, help, None, MetricType::Histogram)?)
}

impl Collector for HostCollector {
    fn encode(&self, mut e: DescriptorEncoder<'_>) -> std::fmt::Result {
        let Some(core) = self.0.upgrade() else {
            return Ok(());
        };
        let s = core.sample();
        gauge(
            &mut e,
            "wfhost_processes",
            "Processes that have not finished",
            s.processes,
        )?;
        gauge(
            &mut e,
            "wfhost_processes_hibernated",
            "Processes hibernated: waiting, their state saved, with no instance",
            s.hibernated,
        )?;
        gauge(
            &mut e,
            "wfhost_processes_waiting_for_instance",
            "Hibernated processes woken by an event that wait for a free instance",
            s.waiting_for_instance,
        )?;
        gauge(
            &mut e,
            "wfhost_instances",
            "Wasm instances held by processes",
            s.live_instances,
        )?;
        gauge(
            &mut e,
            "wfhost_instances_warm",
            "Wasm instances kept for reuse",
            s.warm_instances,
        )?;
        counter(&mut e, "wfhost_steps", "Process steps taken", s.steps)?;
        counter(
            &mut e,
            "wfhost_processes_spawned",
            "Processes spawned",
            s.spawned,
        )?;
        counter(
            &mut e,
            "wfhost_processes_finished",
            "Processes that finished (done, failed, terminated or closed at shutdown)",
            s.finished,
        )?;
        counter(
            &mut e,
            "wfhost_module_compiles",
            "Modules compiled (a module found compiled, in memory or in the module cache, is not)",
            s.compiles,
        )?;
        histogram(
            &mut e,
            "wfhost_step_duration_seconds",
            "How long a process's step ran (the wasm call)",
            &core.step_seconds,
        )?;
        if let Some(d) = s.durable {
            gauge(
                &mut e,
                "wfhost_workflows_running",
                "Durable workflows this host runs",
                d.running,
            )?;
            gauge(
                &mut e,
                "wfhost_workflows_damaged",
                "Workflows whose journal this host could not read back, left as they were",
                d.damaged,
            )?;
            gauge(
                &mut e,
                "wfhost_journal_pending",
                "Entries handed to the journal's writer and not yet committed",
                d.pending,
            )?;
            gauge(
                &mut e,
                "wfhost_store_up",
                "1 while the store takes this host's writes; 0 once it failed (full, read-only, \
                 unreachable past patience, or the lease was lost)",
                u64::from(d.store_up),
            )?;
            if let Some(held) = d.lease_held {
                gauge(
                    &mut e,
                    "wfhost_lease_held",
                    "1 while this host's lease on a store hosts share holds",
                    u64::from(held),
                )?;
            }
            histogram(
                &mut e,
                "wfhost_journal_commit_duration_seconds",
                "How long a commit of the journal took (its transaction and sync)",
                &core.commit_seconds,
            )?;
            histogram(
                &mut e,
                "wfhost_journal_steps_per_commit",
                "Steps journaled by one commit",
                &core.steps_per_commit,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Sample);

    impl Source for Fixed {
        fn sample(&self) -> Sample {
            self.0
        }
    }

    #[test]
    fn counts_go_on_across_hosts() {
        let metrics = Metrics::new();
        let first: Arc<dyn Source> = Arc::new(Fixed(Sample {
            steps: 10,
            ..Sample::default()
        }));
        metrics.attach(Arc::downgrade(&first));
        assert!(metrics.encode().contains("wfhost_steps_total 10\n"));
        metrics.detach(first.as_ref());
        drop(first);
        let second: Arc<dyn Source> = Arc::new(Fixed(Sample {
            steps: 3,
            ..Sample::default()
        }));
        metrics.attach(Arc::downgrade(&second));
        let text = metrics.encode();
        assert!(text.contains("wfhost_steps_total 13\n"), "{text}");
        assert!(!text.contains("wfhost_store_up"), "not durable: {text}");
    }
}
