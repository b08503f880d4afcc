//! `wfhost serve --otlp-endpoint URL`: the engine's and the API's spans (see `wfhost::trace`)
//! exported over OTLP (HTTP, protobuf) by the OpenTelemetry SDK, in batches, from a thread of
//! its own, through a small client over ureq.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The URL spans are sent to: `endpoint` (the collector's base, as `--otlp-endpoint` and
/// `OTEL_EXPORTER_OTLP_ENDPOINT` give it) with the traces' path, `/v1/traces`, unless its path
/// ends with it already; an error for what is not an `http://` or `https://` URL.
pub(crate) fn traces_url(endpoint: &str) -> anyhow::Result<String> {
    let endpoint = endpoint.trim();
    let shown = wfhost::store::redact(endpoint);
    let mut url = url::Url::parse(endpoint).with_context(|| {
        format!(
            "the OTLP endpoint '{shown}' is not a URL: give the collector's, as \
             http://HOST:4318"
        )
    })?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https") && url.host().is_some(),
        "the OTLP endpoint '{shown}' is not an http:// or https:// URL: give the collector's \
         OTLP/HTTP address, as http://HOST:4318 (OTLP over gRPC is not spoken)"
    );
    let path = url.path().trim_end_matches('/').to_string();
    if !path.ends_with("/v1/traces") {
        url.set_path(&format!("{path}/v1/traces"));
    }
    Ok(url.to_string())
}

/// `url` (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the whole URL spans are sent to) as it is,
/// or an error for what is not an `http://` or `https://` URL.
fn whole_url(url: &str) -> anyhow::Result<String> {
    let url = url.trim();
    let shown = wfhost::store::redact(url);
    let parsed = url::Url::parse(url)
        .with_context(|| format!("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT '{shown}' is not a URL"))?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "http" | "https") && parsed.host().is_some(),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT '{shown}' is not an http:// or https:// URL"
    );
    Ok(url.to_string())
}

/// Where traces go (see [`configured_by`]), from `--otlp-endpoint` and the environment.
pub(crate) fn configured(flag: Option<&str>) -> anyhow::Result<Option<String>> {
    configured_by(flag, |name| std::env::var(name).ok())
}

/// Where traces go, from `--otlp-endpoint` (`flag`, which clap fills from
/// `OTEL_EXPORTER_OTLP_ENDPOINT` when neither the command line nor the configuration file gives
/// it) and the variables `var` reads: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the whole URL) wins
/// over `OTEL_EXPORTER_OTLP_ENDPOINT` (the collector's base), as OpenTelemetry's specification
/// says, and a flag or the file over both; an empty variable is none. `None` when nothing names
/// a collector, or the SDK's variables turn traces off (`OTEL_SDK_DISABLED=true`,
/// `OTEL_TRACES_EXPORTER=none`). A setting that cannot be used (not an http:// URL, a protocol
/// other than http/protobuf) is an error when the command line or the configuration file gave
/// it; from the environment, where a platform may have set it for other programs, it is said
/// in the log and the host serves untraced.
fn configured_by(
    flag: Option<&str>,
    var: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<String>> {
    let var = |name: &str| {
        var(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let flag = flag.map(str::trim).filter(|f| !f.is_empty());
    let generic = var("OTEL_EXPORTER_OTLP_ENDPOINT");
    // Clap gives the generic variable as the flag: the same value is the variable's.
    let given = flag.filter(|f| generic.as_deref() != Some(*f));
    let (url, from_env) = match (given, var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), generic) {
        (Some(endpoint), _, _) => (traces_url(endpoint), false),
        (None, Some(url), _) => (whole_url(&url), true),
        (None, None, Some(endpoint)) => (traces_url(&endpoint), true),
        (None, None, None) => return Ok(None),
    };
    let off = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    if off {
        eprintln!("wfhost serve: traces are off (OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none)");
        return Ok(None);
    }
    let protocol =
        var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    let checked = url.and_then(|url| match protocol {
        Some(protocol) if protocol != "http/protobuf" => Err(anyhow::anyhow!(
            "traces are exported over OTLP/HTTP with protobuf (http/protobuf), not \
             '{protocol}' as OTEL_EXPORTER_OTLP_PROTOCOL says: give the collector's HTTP \
             address (port 4318) and unset the protocol, or set it to http/protobuf"
        )),
        _ => Ok(url),
    });
    match checked {
        Ok(url) => Ok(Some(url)),
        Err(error) if from_env => {
            tracing::warn!("traces are off: {error:#}");
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// The SDK's tracer provider, exporting to a collector; flushed and stopped when dropped.
pub(crate) struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Exports to the collector at `url` (see [`configured`]). The SDK reads the standard
    /// variables too (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`,
    /// `OTEL_TRACES_SAMPLER`, `OTEL_EXPORTER_OTLP_HEADERS`).
    pub(crate) fn start(url: &str) -> anyhow::Result<Exporter> {
        let url = url.to_string();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(EXPORT_TIMEOUT))
            .build()
            .into();
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(Ureq {
                agent,
                url: wfhost::store::redact(&url),
                failing: AtomicBool::new(false),
            })
            .build()
            .with_context(|| format!("cannot export traces to {}", wfhost::store::redact(&url)))?;
        // `wfhost`, unless the environment names the service.
        let named = std::env::var_os("OTEL_SERVICE_NAME").is_some_and(|v| !v.is_empty())
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
        let mut resource = Resource::builder();
        if !named {
            resource = resource.with_service_name("wfhost");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        Ok(Exporter { provider })
    }

    /// A tracer of its provider's.
    pub(crate) fn tracer(&self) -> SdkTracer {
        self.provider.tracer("wfhost")
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // What is in the batch is sent before the program ends.
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!("the last traces may not have been exported: {error}");
        }
    }
}

/// OTLP's HTTP client: ureq, which the batch's thread blocks on.
#[derive(Debug)]
struct Ureq {
    agent: ureq::Agent,
    /// The collector's URL, its password masked, for the log.
    url: String,
    /// The last export failed: said once until one succeeds.
    failing: AtomicBool,
}

#[async_trait::async_trait]
impl HttpClient for Ureq {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let sent = self
            .agent
            .run(request.map(|body| body.to_vec()))
            .map_err(HttpError::from)
            .and_then(|response| {
                let (parts, mut body) = response.into_parts();
                let body = body.read_to_vec().map_err(HttpError::from)?;
                Ok(Response::from_parts(parts, Bytes::from(body)))
            });
        let failure = match &sent {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!("it answered {}", response.status())),
            Err(error) => Some(error.to_string()),
        };
        match failure {
            Some(why) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "traces could not be exported to {} ({why}): those of the failed \
                         batches are lost; trying again with the next",
                        self.url
                    );
                }
            }
            None => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("traces are exported to {} again", self.url);
                }
            }
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::{configured_by, traces_url};

    /// Where traces go with `flag` and the variables `vars`.
    fn configured(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<String>, String> {
        let vars: std::collections::HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        configured_by(flag, |name| vars.get(name).cloned()).map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn the_flag_wins_then_the_traces_variable_then_the_base() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318");
        let whole = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/otlp/traces",
        );
        let url = |u: &str| Ok(Some(u.to_string()));
        assert_eq!(configured(None, &[]), Ok(None));
        // Clap fills the flag from the base variable: the same value is the variable's.
        assert_eq!(
            configured(Some("http://base:4318"), &[base]),
            url("http://base:4318/v1/traces")
        );
        assert_eq!(
            configured(Some("http://base:4318"), &[base, whole]),
            url("http://c:4318/otlp/traces")
        );
        assert_eq!(configured(None, &[whole]), url("http://c:4318/otlp/traces"));
        assert_eq!(
            configured(Some("http://flag:4318"), &[base, whole]),
            url("http://flag:4318/v1/traces")
        );
        // Empty is none.
        assert_eq!(
            configured(Some(""), &[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]),
            Ok(None)
        );
        assert_eq!(configured(Some("  "), &[]), Ok(None));
        // Off.
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(configured(Some("http://flag:4318"), &[off]), Ok(None));
        }
        // What cannot be used: an error from a flag, untraced from the environment.
        let grpc = ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
        let error = configured(Some("http://flag:4318"), &[grpc]).unwrap_err();
        assert!(error.contains("not 'grpc'"), "{error}");
        assert_eq!(
            configured(Some("http://base:4318"), &[base, grpc]),
            Ok(None)
        );
        assert!(configured(Some("collector:4317"), &[]).is_err());
        let bad = ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317");
        assert_eq!(configured(Some("collector:4317"), &[bad]), Ok(None));
        let bad_whole = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4317");
        assert_eq!(configured(None, &[bad_whole]), Ok(None));
    }

    #[test]
    fn the_traces_path_is_added_to_a_collector_s_address() {
        for (given, url) in [
            ("http://localhost:4318", "http://localhost:4318/v1/traces"),
            ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
            (
                "https://otel.example/base",
                "https://otel.example/base/v1/traces",
            ),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
            ("http://c:4318?x=1", "http://c:4318/v1/traces?x=1"),
        ] {
            assert_eq!(traces_url(given).unwrap(), url);
        }
        for bad in [
            "localhost:4318",
            "grpc://c:4317",
            "nonsense",
            "file:///tmp/x",
        ] {
            let error = traces_url(bad).unwrap_err().to_string();
            assert!(error.contains("OTLP endpoint"), "{bad}: {error}");
        }
        let error = traces_url("ftp://me:hunter2@c").unwrap_err().to_string();
        assert!(!error.contains("hunter2"), "{error}");
    }
}
