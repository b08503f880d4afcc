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

/// Adds to every operation the answers every route may give, which the routes do not each
/// repeat: `401` (every route but `/healthz`), `403` (another origin), `413` (a body past the
/// limit), `503` (no host, the store unreachable, too busy) and `504` (a request past its
/// time).
pub(crate) fn add_common_answers(document: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build()
    };
    for (path, item) in document.paths.paths.iter_mut() {
        let operations = [
            (&mut item.get, false),
            (&mut item.post, true),
            (&mut item.put, true),
            (&mut item.delete, false),
        ];
        for (operation, has_body) in operations {
            let Some(operation) = operation.as_mut() else {
                continue;
            };
            let responses = &mut operation.responses.responses;
            let mut add = |status: &str, description: &str| {
                responses
                    .entry(status.to_string())
                    .or_insert_with(|| error(description).into());
            };
            if path != "/healthz" {
                add("401", "No token, or not this server's");
            }
            add("403", "From another origin (a web page), or, on a server without a token, for a host name that is not loopback");
            if has_body {
                add("413", "The body is larger than the server takes");
            }
            add("503", "No host just now (it starts or stops), the store is unreachable, or the server is too busy");
            add("504", "The request took longer than the server allows");
        }
    }
}
