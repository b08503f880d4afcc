//! Locations as they are logged and printed: without their passwords.

/// `url` with the password of its user part (`user:password@`) replaced by `***`, and any
/// `password=` option's value too: locations are logged and printed in errors.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = &out[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                let start = scheme_end + 3 + colon + 1;
                let end = scheme_end + 3 + at;
                out.replace_range(start..end, "***");
            }
        }
    }
    if let Some(query) = out.find('?') {
        let mut redacted = out[..=query].to_string();
        let options: Vec<String> = out[query + 1..]
            .split('&')
            .map(|option| match option.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => option.to_string(),
            })
            .collect();
        redacted.push_str(&options.join("&"));
        out = redacted;
    }
    out
}
