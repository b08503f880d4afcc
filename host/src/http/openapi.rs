//! The OpenAPI document: its frame here, its paths and schemas from the routes' own
//! annotations and the wire types (`utoipa`), so the document and the routes cannot drift.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::Modify;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "wfhost",
        description = "The HTTP API of a wfhost server: store modules, start workflows, watch, \
                       message and cancel them, read their histories, its hosts and metrics.",
    ),
    modifiers(&Token),
    security(("token" = [])),
    tags(
        (name = "workflows", description = "Start, watch, message and cancel workflows"),
        (name = "modules", description = "The modules workflows run, by SHA-256"),
        (name = "hosts", description = "The hosts of the store"),
        (name = "operations", description = "Health, readiness, metrics, this document"),
    )
)]
pub(crate) struct Frame;

/// The token every route but `/healthz` wants, when the server has one.
struct Token;

impl Modify for Token {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}
