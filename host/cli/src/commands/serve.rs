//! `wfhost serve`: a long-running host on a store. On a store hosts share (PostgreSQL) it claims
//! the workflows no live host owns, again and again, and runs them; on SQLite it is the one host
//! and runs every unfinished workflow. SIGTERM or Ctrl-C stops it gracefully: it claims nothing
//! more, stops its workflows where their journals end, and gives them back to the other hosts.

use std::time::Duration;

use anyhow::Context as _;
use wfhost::store::Location;
use wfhost::{Host, Metrics};
use wfhost_server::Server;

use crate::args::host::DurabilityArgs;
use crate::args::limits::{CacheArgs, LimitArgs};
use crate::args::units::parse_duration;

/// Serves a store: runs its workflows until stopped (SIGTERM, Ctrl-C); with --http, answers the
/// HTTP API (and /metrics) too.
///
/// On a PostgreSQL store several `wfhost serve` share the work: each claims the workflows no live
/// host owns (new ones from `wfhost start`, and those of a host whose lease ran out) and runs
/// them; a host that dies loses its workflows to the others after its lease (--lease). On a
/// SQLite file it is the only host. Stopping gives what it runs back to the other hosts at once.
#[derive(Debug, clap::Parser)]
pub struct ServeCommand {
    /// Read settings from this TOML file, each key named as its flag (`store = "wf.db"`,
    /// `http = "127.0.0.1:8080"`, `worker-function = ["payments.charge"]`, `on-demand = true`).
    /// Flags on the command line win over environment variables, which win over the file.
    /// `wfhost config check FILE` checks one without serving.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,

    /// The store: a PostgreSQL URL (hosts share it) or a SQLite file (this host alone).
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,

    /// Worker threads. Default: one per core.
    #[arg(long, value_name = "N")]
    workers: Option<usize>,

    /// How often to look for workflows to claim (e.g. 500ms, 2s).
    /// Clients' starts, messages and cancels wake the host at once (PostgreSQL's LISTEN); the
    /// poll catches the rest (messages from workflows on other hosts, leases that ran out).
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    poll: Duration,

    /// The most trees of workflows (a top-level workflow and what it spawned) claimed at one
    /// look, so that hosts starting together share the work; never more than the host has free
    /// process slots (`--max-processes` and the memory it has).
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    claim: usize,

    /// On SIGTERM or Ctrl-C: how long running steps may take to finish before the host stops.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    grace: Duration,

    /// Keep finished workflows this long after they finished, then remove them with their
    /// trees and everything of theirs, as `wfhost prune` does (e.g. 30d, 12h). Default: keep
    /// them for ever.
    #[arg(long, value_name = "AGE", value_parser = parse_duration)]
    retain: Option<Duration>,

    #[command(flatten)]
    durability: DurabilityArgs,

    #[command(flatten)]
    limits: LimitArgs,

    #[command(flatten)]
    cache: CacheArgs,

    #[command(flatten)]
    http: crate::args::http::HttpArgs,

    #[command(flatten)]
    workers_fns: crate::args::outbound::WorkerFunctionArgs,

    /// Export traces over OTLP (HTTP, protobuf) to the OpenTelemetry collector at this address
    /// (http://HOST:4318; `/v1/traces` is added): a span for each workflow run, step and call
    /// (host functions, HTTP, worker tasks, which get the call's `traceparent`), and for each
    /// API request, a child of the request's `traceparent`. The SDK's OTEL_* variables
    /// (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, ...) apply.
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,

    /// The settings it runs with, in words (set after parsing; logged at start).
    #[arg(skip)]
    settings: String,
}

impl ServeCommand {
    /// Says the settings it runs with when it starts.
    pub fn describe(&mut self, settings: String) {
        self.settings = settings;
    }

    /// What can be checked without serving: the settings agree with each other, and the
    /// token and TLS files can be read.
    pub fn check(&self) -> anyhow::Result<()> {
        self.consistent()?;
        crate::traces::configured(self.otlp_endpoint.as_deref())?;
        self.http.check(self.limits.max_module_size())
    }

    /// The settings agree with each other.
    fn consistent(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.claim > 0, "--claim must be at least 1");
        anyhow::ensure!(
            !self.workers_fns.any() || self.http.given(),
            "--worker-function needs --http: activity workers take their tasks from the HTTP API"
        );
        Ok(())
    }

    pub fn execute(self) -> anyhow::Result<()> {
        self.consistent()?;
        match &self.config {
            Some(file) => eprintln!(
                "wfhost serve: settings ({}): {}",
                file.display(),
                self.settings
            ),
            None => eprintln!("wfhost serve: settings: {}", self.settings),
        }
        let metrics = Metrics::new();
        // Dropped last: what is left of the traces is sent once the host has stopped.
        let exporter = match crate::traces::configured(self.otlp_endpoint.as_deref())? {
            Some(url) => Some(crate::traces::Exporter::start(&url)?),
            None => None,
        };
        let tasks = self.workers_fns.tasks(&self.store)?;
        let mut api = self.http.api(&metrics, self.limits.max_module_size())?;
        if let Some(exporter) = &exporter {
            api = api.map(|api| api.tracer(exporter.tracer()));
        }
        if let Some(tasks) = &tasks {
            if let Some(with) = api.take() {
                api = Some(self.workers_fns.api(with, tasks)?);
            }
        }
        let mut server = Server::new()
            .poll(self.poll)
            .claim(self.claim)
            .grace(self.grace)
            .grants(self.workers_fns.grant(self.limits.grants()));
        if let Some(api) = &api {
            server = server.api(api.clone());
        }
        if let Some(age) = self.retain {
            server = server.retain(age);
        }
        // Listening before the first host is built: a port in use says so at once, and the
        // API answers 503 until the host is there.
        let serving = match &api {
            Some(api) => Some(self.http.serve(api)?),
            None => None,
        };
        let stopper = server.stopper();
        ctrlc::set_handler(move || {
            eprintln!("wfhost serve: stopping; giving back what this host runs");
            stopper.stop();
        })
        .context("cannot install the SIGTERM and Ctrl-C handler")?;
        let mut hosts = 0u32;
        let served = server.run(|| {
            let host = self
                .build(&metrics, tasks.as_ref(), exporter.as_ref())
                .map_err(|e| wfhost::Error::new(wfhost::ErrorKind::Config, format!("{e:#}")))?;
            if hosts > 0 {
                eprintln!("wfhost serve: the store was lost; starting again as a new host");
            }
            hosts += 1;
            let who = host
                .store_host()
                .map_or_else(|| "the only host".to_string(), |id| format!("host {id}"));
            eprintln!("wfhost serve: serving {} as {who}", self.store);
            Ok(host)
        });
        if let Some(serving) = serving {
            serving.stop();
        }
        served?;
        Ok(())
    }

    fn build(
        &self,
        metrics: &Metrics,
        tasks: Option<&wfhost::tasks::Tasks>,
        exporter: Option<&crate::traces::Exporter>,
    ) -> anyhow::Result<Host> {
        let builder = crate::args::host::builder(
            self.workers,
            Some(&self.limits),
            &self.cache,
            Some((&self.store, &self.durability)),
        )?;
        let mut builder = self.workers_fns.apply(builder, tasks);
        if let Some(exporter) = exporter {
            builder = builder.tracer(exporter.tracer());
        }
        crate::args::host::build(builder.metrics(metrics))
    }
}
