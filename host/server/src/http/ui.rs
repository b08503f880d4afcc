//! The web UI: one page and its script and stylesheet, shipped inside the binary and served by
//! the same server as the API (`GET /`, `/ui/app.js`, `/ui/app.css`), with no token (they hold
//! no data: the page asks for the token and sends it with each call it makes to the API, which
//! is all it does). No framework and no build step: plain files, so the page works on a machine
//! with no internet and the Rust build is the whole build (ARCHITECTURE.md says why).

use std::sync::{Arc, OnceLock};

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sha2::{Digest, Sha256};

use super::state::AppState;

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// What the page may do: load its own script and stylesheet and call its own server, nothing
/// else (no inline script, no other origin, not framed).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self'; form-action 'self'; \
                      frame-ancestors 'none'; base-uri 'none'";

/// The paths the UI serves without a token.
pub(crate) fn is_ui_path(path: &str) -> bool {
    matches!(path, "/" | "/ui/app.js" | "/ui/app.css")
}

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(|request: Request| async move { asset(&request, INDEX, "text/html; charset=utf-8") }))
        .route(
            "/ui/app.js",
            get(|request: Request| async move { asset(&request, SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/app.css",
            get(|request: Request| async move { asset(&request, STYLE, "text/css; charset=utf-8") }),
        )
}

/// The files' tag for caches: a browser asks again each time (`no-cache`), and is told
/// `304 Not Modified` while the server runs the same build.
fn etag() -> &'static HeaderValue {
    static ETAG: OnceLock<HeaderValue> = OnceLock::new();
    ETAG.get_or_init(|| {
        let digest = Sha256::new()
            .chain_update(INDEX)
            .chain_update(SCRIPT)
            .chain_update(STYLE)
            .finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a header value")
    })
}

fn asset(request: &Request, body: &'static str, content_type: &'static str) -> Response {
    let etag = etag();
    let fresh = request
        .headers()
        .get(header::IF_NONE_MATCH)
        .is_some_and(|tags| tags.as_bytes() == etag.as_bytes());
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::ETAG, etag.clone());
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
