//! The operator's allowlist of URLs (`--allow-http`), and which addresses a workflow may reach.
//!
//! A pattern is `SCHEME://HOST[:PORT][/PATH]`: the scheme `http` or `https`; the host a name,
//! `*.name` (any name under it), `*` (any host), or an IP address (`[...]` for IPv6); the port a
//! number or `*` (none: the scheme's); the path a prefix when it ends with `*`, else exact (none:
//! any path). An address that is not public (loopback, private, link-local, shared, multicast,
//! unspecified, ...) is reached only through a pattern that names it as an IP address (or as
//! `localhost`, for loopback), or when the operator allows private addresses for every pattern:
//! a name that resolves to one, a redirect to one, or a pattern of `*`, never reaches the host's
//! own API or a metadata service by accident.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

/// One allowlist pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    text: String,
    https: bool,
    host: HostPattern,
    /// `None`: any port.
    port: Option<u16>,
    path: PathPattern,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Any,
    Exact(String),
    /// `*.suffix`: names ending in `.suffix`.
    Under(String),
    Address(IpAddr),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum PathPattern {
    Any,
    Prefix(String),
    Exact(String),
}

impl Pattern {
    /// Parses `text`, or says what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Pattern, String> {
        let bad = |why: &str| {
            format!(
                "'{text}' is not an HTTP allowlist pattern: {why} (write it as \
                 https://api.example.com/v1/*, https://*.example.com/*, http://10.0.0.5:8080/*)"
            )
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("it has no scheme"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("the scheme must be http or https")),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad("it has user information"));
        }
        let (host, port) = split_port(authority).ok_or_else(|| bad("its port is not a number"))?;
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            HostPattern::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(bad("a wildcard host is * or *.name"));
            }
            HostPattern::Under(suffix.to_string())
        } else if host.is_empty() {
            return Err(bad("it has no host"));
        } else if host.contains('*') {
            return Err(bad("a wildcard host is * or *.name"));
        } else if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            HostPattern::Address(IpAddr::V6(
                v6.parse().map_err(|_| bad("its IPv6 address is not one"))?,
            ))
        } else if let Ok(address) = host.parse::<Ipv4Addr>() {
            HostPattern::Address(IpAddr::V4(address))
        } else {
            // Normalized as URLs normalize hosts (punycode), so that the comparison is fair.
            let parsed = Url::parse(&format!("http://{host}/"))
                .map_err(|_| bad("its host is not a host name"))?;
            HostPattern::Exact(parsed.host_str().unwrap_or_default().to_string())
        };
        let port = match port {
            None => Some(if https { 443 } else { 80 }),
            Some("*") => None,
            Some(port) => Some(port.parse().map_err(|_| bad("its port is not a number"))?),
        };
        let path = if path.is_empty() || path == "/*" {
            PathPattern::Any
        } else if let Some(prefix) = path.strip_suffix('*') {
            if prefix.contains('*') {
                return Err(bad("only a path's end may be *"));
            }
            PathPattern::Prefix(prefix.to_string())
        } else if path.contains('*') || path.contains('?') || path.contains('#') {
            return Err(bad("only a path's end may be *, and it has no query"));
        } else {
            PathPattern::Exact(path.to_string())
        };
        Ok(Pattern {
            text: text.to_string(),
            https,
            host,
            port,
            path,
        })
    }

    /// The pattern as the operator wrote it.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether `url` is within the pattern.
    pub(crate) fn matches(&self, url: &Url) -> bool {
        let scheme_ok = match url.scheme() {
            "https" => self.https,
            "http" => !self.https,
            _ => false,
        };
        if !scheme_ok {
            return false;
        }
        if let Some(port) = self.port {
            if url.port_or_known_default() != Some(port) {
                return false;
            }
        }
        let host_ok = match (&self.host, url.host()) {
            (HostPattern::Any, Some(_)) => true,
            (HostPattern::Exact(name), Some(Host::Domain(host))) => name == host,
            (HostPattern::Under(suffix), Some(Host::Domain(host))) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            (HostPattern::Address(address), Some(Host::Ipv4(host))) => *address == IpAddr::V4(host),
            (HostPattern::Address(address), Some(Host::Ipv6(host))) => *address == IpAddr::V6(host),
            _ => false,
        };
        if !host_ok {
            return false;
        }
        match &self.path {
            PathPattern::Any => true,
            PathPattern::Prefix(prefix) => url.path().starts_with(prefix.as_str()),
            PathPattern::Exact(path) => url.path() == path,
        }
    }

    /// Whether the pattern names the address it lets a workflow reach: an IP address, or
    /// `localhost`.
    pub(crate) fn names_address(&self) -> bool {
        match &self.host {
            HostPattern::Address(_) => true,
            HostPattern::Exact(name) => name == "localhost",
            _ => false,
        }
    }
}

/// `host[:port]` split; `None` when the port is not a number or `*`.
fn split_port(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(port) => Some((host, Some(port))),
            None if rest.is_empty() => Some((host, None)),
            None => None,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port == "*" || port.parse::<u16>().is_ok() => {
            Some((host, Some(port)))
        }
        Some(_) => None,
        None => Some((authority, None)),
    }
}

/// Whether `address` is on the public internet: not loopback, private, link-local, shared
/// (carrier-grade NAT), multicast, broadcast, unspecified, reserved or documentation space, nor
/// an IPv6 form of one of those.
pub(crate) fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 88 && c == 99)
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    let last32 = Ipv4Addr::from((u32::from(segments[6]) << 16) | u32::from(segments[7]));
    // The forms that carry a whole IPv4 address, which is then what is reached: IPv4-mapped
    // (::ffff:0:0/96), IPv4-translated (::ffff:0:0:0/96), NAT64 (64:ff9b::/96), 6to4 (2002::/16,
    // in bits 16 to 48).
    if segments[..6] == [0, 0, 0, 0, 0, 0xffff]
        || segments[..6] == [0, 0, 0, 0, 0xffff, 0]
        || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        return is_public_v4(last32);
    }
    if segments[0] == 0x2002 {
        return is_public_v4(Ipv4Addr::from(
            (u32::from(segments[1]) << 16) | u32::from(segments[2]),
        ));
    }
    // ISATAP (an interface id of 0:5efe or 200:5efe, under any prefix) carries one in its last
    // 32 bits, reached through the prefix's router: both must be public.
    if segments[5] == 0x5efe && (segments[4] | 0x0200) == 0x0200 && !is_public_v4(last32) {
        return false;
    }
    // Teredo (2001::/32), local-use NAT64 (64:ff9b:1::/48) and discard-only (100::/64) reach
    // addresses a pattern cannot see: refused.
    if (segments[0] == 0x2001 && segments[1] == 0)
        || segments[..3] == [0x64, 0xff9b, 1]
        || segments[..4] == [0x100, 0, 0, 0]
    {
        return false;
    }
    // The unspecified, loopback and IPv4-compatible (::/96) addresses are all refused here.
    !(ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00
        || (segments[0] & 0xffc0) == 0xfe80
        || (segments[0] & 0xffc0) == 0xfec0
        || segments[0] == 0x2001 && segments[1] == 0xdb8
        || segments[..6] == [0, 0, 0, 0, 0, 0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn patterns_match_scheme_host_port_and_path() {
        let api = Pattern::parse("https://api.example.com/v1/*").unwrap();
        assert!(api.matches(&url("https://api.example.com/v1/charges?x=1")));
        assert!(api.matches(&url("https://API.example.com:443/v1/")));
        assert!(!api.matches(&url("http://api.example.com/v1/x")));
        assert!(!api.matches(&url("https://api.example.com:8443/v1/x")));
        assert!(!api.matches(&url("https://api.example.com/v2/x")));
        assert!(!api.matches(&url("https://api.example.com/v1/../admin")));
        assert!(!api.matches(&url("https://api.example.com.evil.net/v1/x")));
        assert!(!api.matches(&url("https://evil.net/v1/x#api.example.com")));
        let under = Pattern::parse("https://*.example.com").unwrap();
        assert!(under.matches(&url("https://a.b.example.com/anything")));
        assert!(!under.matches(&url("https://example.com/")));
        assert!(!under.matches(&url("https://badexample.com/")));
        let local = Pattern::parse("http://127.0.0.1:*/hook").unwrap();
        assert!(local.matches(&url("http://127.0.0.1:9000/hook")));
        assert!(!local.matches(&url("http://127.0.0.1:9000/hook/2")));
        assert!(local.names_address());
        assert!(!Pattern::parse("http://*").unwrap().names_address());
        assert!(Pattern::parse("http://[::1]:8080/*")
            .unwrap()
            .matches(&url("http://[::1]:8080/x")));
        for bad in [
            "api.example.com",
            "ftp://x/",
            "https://a*b.com/",
            "https://x:port/",
            "https://u@x/",
            "https:///x",
            "https://x/a*/b",
        ] {
            let error = Pattern::parse(bad).unwrap_err();
            assert!(
                error.contains("is not an HTTP allowlist pattern"),
                "{error}"
            );
        }
    }

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2001:0:4136:e378::1",
            "192.88.99.1",
            // IPv4-translated, IPv4-compatible and ISATAP forms of private addresses.
            "::ffff:0:127.0.0.1",
            "::ffff:0:a9fe:a9fe",
            "::ffff:0:10.0.0.1",
            "::127.0.0.1",
            "::10.0.0.1",
            "2606:4700::5efe:127.0.0.1",
            "2606:4700::200:5efe:a9fe:a9fe",
            "fe80::5efe:8.8.8.8",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "2002:808:808::",
            "2606:4700::5efe:8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }
}
