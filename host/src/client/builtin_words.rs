//! The host's own functions in words, for [`Narrator`](super::Narrator): an outbound HTTP call
//! as its method, URL, status and sizes (bodies as JSON or text where they are), a retry
//! policy's question and answer as what they say. Their payloads are postcard, which tells an
//! operator nothing as bytes.

use serde_json::{json, Value};
use wfcontract::builtin::{HTTP_FUNCTION, RETRY_POLICY_FUNCTION};
use wfcontract::{Encoding, Header, HttpRequest, HttpResponse, Payload, RetryPolicy};

/// The most of a body the words show; the JSON has it all (as JSON or text where it is).
const SHOWN_BODY: usize = 200;

/// What a header's or a query parameter's name holds when its value is a credential (any case):
/// such values are shown as `***`. Broad on purpose: the API a workflow calls names its
/// credentials, not the workflow's author.
const SECRET_NAMES: [&str; 10] = [
    "auth",
    "token",
    "key",
    "secret",
    "session",
    "cookie",
    "password",
    "passwd",
    "signature",
    "credential",
];

/// Whether a header or parameter named `name` holds a credential.
fn secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_NAMES.iter().any(|s| name.contains(s))
}

/// `url` as it may be shown: a password in it and the values of credential parameters masked.
fn shown_url(url: &str) -> String {
    let url = wfhost_store::redact(url);
    let Some((base, query)) = url.split_once('?') else {
        return url;
    };
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if secret(name) => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect();
    let mut shown = format!("{base}?{}", query.join("&"));
    if let Some(fragment) = fragment {
        shown.push('#');
        shown.push_str(fragment);
    }
    shown
}

/// The input of a call to `name` in words and as JSON, when `name` is one of the host's own
/// functions and the input reads as its request.
pub(super) fn input(name: &str, input: &Payload) -> Option<(String, Value)> {
    if input.encoding != Encoding::Postcard {
        return None;
    }
    match name {
        HTTP_FUNCTION => {
            let request: HttpRequest = postcard::from_bytes(&input.bytes).ok()?;
            let url = shown_url(&request.url);
            let mut words = format!("{} {url}", request.method);
            if !request.body.is_empty() {
                words.push_str(&format!(
                    ", {}",
                    body_words(&request.body, &request.headers)
                ));
            }
            let value = json!({
                "method": request.method,
                "url": url,
                "headers": headers_json(&request.headers),
                "body": body_json(&request.body),
                "body_size": request.body.len(),
                "timeout_ms": request.timeout.map(|t| t.as_millis() as u64),
            });
            Some((words, value))
        }
        RETRY_POLICY_FUNCTION => {
            let function: String = postcard::from_bytes(&input.bytes).ok()?;
            Some((format!("the policy for '{function}'"), json!(function)))
        }
        _ => None,
    }
}

/// The answer of a call to `name` in words and as JSON, as [`input`].
pub(super) fn answer(name: &str, answer: &Payload) -> Option<(String, Value)> {
    if answer.encoding != Encoding::Postcard {
        return None;
    }
    match name {
        HTTP_FUNCTION => {
            let response: HttpResponse = postcard::from_bytes(&answer.bytes).ok()?;
            let words = format!(
                "{} {}",
                response.status,
                body_words(&response.body, &response.headers)
            );
            let value = json!({
                "status": response.status,
                "headers": headers_json(&response.headers),
                "body": body_json(&response.body),
                "body_size": response.body.len(),
            });
            Some((words, value))
        }
        RETRY_POLICY_FUNCTION => {
            let policy: Option<RetryPolicy> = postcard::from_bytes(&answer.bytes).ok()?;
            Some(match policy {
                None => ("no policy (no retries)".into(), Value::Null),
                Some(policy) => (policy_words(&policy), policy_json(&policy)),
            })
        }
        _ => None,
    }
}

/// `1234 bytes (application/json): {"a": 1}`, the body cut at [`SHOWN_BODY`] bytes.
fn body_words(body: &[u8], headers: &[Header]) -> String {
    let kind = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-type"))
        .map_or_else(String::new, |h| format!(" ({})", h.value));
    let size = format!(
        "{} byte{}{kind}",
        body.len(),
        if body.len() == 1 { "" } else { "s" }
    );
    match std::str::from_utf8(body) {
        Ok("") => size,
        Ok(text) if text.len() <= SHOWN_BODY => format!("{size}: {text}"),
        Ok(text) => {
            let mut end = SHOWN_BODY;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            format!("{size}: {}...", &text[..end])
        }
        Err(_) => size,
    }
}

/// A body as JSON where it is JSON, as text where it is UTF-8, else its bytes in hex.
fn body_json(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        return value;
    }
    match std::str::from_utf8(body) {
        Ok(text) => Value::String(text.to_string()),
        Err(_) => json!({ "hex": body.iter().map(|b| format!("{b:02x}")).collect::<String>() }),
    }
}

fn headers_json(headers: &[Header]) -> Value {
    headers
        .iter()
        .map(|h| {
            json!([
                h.name,
                if secret(&h.name) {
                    "***"
                } else {
                    h.value.as_str()
                }
            ])
        })
        .collect()
}

fn policy_words(policy: &RetryPolicy) -> String {
    let attempts = match policy.max_attempts {
        0 => "no limit to the attempts".to_string(),
        n => format!("at most {n} attempts"),
    };
    format!(
        "{attempts}, {:?} first, x{} each time, at most {:?} apart",
        policy.initial_interval, policy.backoff, policy.max_interval
    )
}

fn policy_json(policy: &RetryPolicy) -> Value {
    json!({
        "initial_interval_ms": policy.initial_interval.as_millis() as u64,
        "backoff": policy.backoff,
        "max_interval_ms": policy.max_interval.as_millis() as u64,
        "max_attempts": policy.max_attempts,
        "max_elapsed_ms": policy.max_elapsed.map(|d| d.as_millis() as u64),
        "non_retryable": policy.non_retryable.iter().map(|k| k.name()).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn postcard<T: serde::Serialize>(value: &T) -> Payload {
        Payload::encode(Encoding::Postcard, value).unwrap()
    }

    #[test]
    fn an_http_call_reads_as_its_method_url_status_and_sizes() {
        let request = HttpRequest::post("https://api.example.com/v1/charges", r#"{"cents":4999}"#)
            .header("content-type", "application/json")
            .header("Authorization", "Bearer sk_live_secret");
        let (words, value) = input(HTTP_FUNCTION, &postcard(&request)).unwrap();
        assert_eq!(
            words,
            r#"POST https://api.example.com/v1/charges, 14 bytes (application/json): {"cents":4999}"#
        );
        assert_eq!(value["body"], json!({"cents": 4999}));
        assert_eq!(value["headers"][1], json!(["Authorization", "***"]));
        assert!(!value.to_string().contains("sk_live_secret"));

        let response = HttpResponse {
            status: 201,
            headers: vec![Header {
                name: "content-type".into(),
                value: "application/json".into(),
            }],
            body: br#"{"id":"ch_1"}"#.to_vec(),
        };
        let (words, value) = answer(HTTP_FUNCTION, &postcard(&response)).unwrap();
        assert_eq!(words, r#"201 13 bytes (application/json): {"id":"ch_1"}"#);
        assert_eq!(
            (value["status"].clone(), value["body"].clone()),
            (json!(201), json!({"id": "ch_1"}))
        );
        // Not the host's own function, or not its request: the payload as it is.
        assert!(input("payments.charge", &postcard(&request)).is_none());
        assert!(input(HTTP_FUNCTION, &Payload::json_bytes(b"{}".to_vec())).is_none());
    }

    #[test]
    fn credentials_in_headers_and_urls_are_masked() {
        for name in [
            "Authorization",
            "api-key",
            "X-Goog-Api-Key",
            "PRIVATE-TOKEN",
            "x-amz-security-token",
            "Cookie",
        ] {
            assert!(secret(name), "{name}");
        }
        assert!(!secret("content-type") && !secret("accept"));
        assert_eq!(
            shown_url("https://u:p4ss@api.example.com/v1?q=kettle&api_key=abc&sig=1#top"),
            "https://u:***@api.example.com/v1?q=kettle&api_key=***&sig=1#top"
        );
        assert_eq!(
            shown_url("https://api.example.com/v1"),
            "https://api.example.com/v1"
        );
    }

    #[test]
    fn a_long_or_binary_body_is_cut_or_sized() {
        let long = "x".repeat(500);
        assert_eq!(
            body_words(long.as_bytes(), &[]),
            format!("500 bytes: {}...", &long[..200])
        );
        assert_eq!(body_words(&[0xff, 0xfe], &[]), "2 bytes");
        assert_eq!(body_json(&[0xff]), json!({"hex": "ff"}));
        assert_eq!(body_json(b"plain"), json!("plain"));
    }

    #[test]
    fn a_retry_policy_reads_as_what_it_says() {
        let (words, value) = input(RETRY_POLICY_FUNCTION, &postcard(&"payments.charge")).unwrap();
        assert_eq!(
            (words.as_str(), value),
            ("the policy for 'payments.charge'", json!("payments.charge"))
        );
        let (words, _) = answer(
            RETRY_POLICY_FUNCTION,
            &postcard(&Some(RetryPolicy::default())),
        )
        .unwrap();
        assert_eq!(
            words,
            "at most 10 attempts, 1s first, x2 each time, at most 100s apart"
        );
        let (words, value) =
            answer(RETRY_POLICY_FUNCTION, &postcard(&None::<RetryPolicy>)).unwrap();
        assert_eq!(
            (words.as_str(), value),
            ("no policy (no retries)", Value::Null)
        );
    }
}
