//! Kubernetes object names as the API server checks them (RFC 1123): one rule for every
//! part of graft that takes a name from outside (claim configurations, graftctl's
//! arguments, device names).

/// An RFC 1123 label: namespaces, container names, device names.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An RFC 1123 subdomain: most object names (pods, claims, custom resources).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for ok in ["a", "gpu-0", "a1"] {
            assert!(is_dns_label(ok) && is_dns_subdomain(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("a.b-c.d") && !is_dns_label("a.b"));
        assert!(!is_dns_subdomain("a..b") && !is_dns_subdomain(".a"));
    }
}
