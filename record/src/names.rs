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

/// A GPU or MIG device UUID as NVML gives it and graft names directories by it (an MPS
/// device's state, `<state>/mps/<uuid>`): `GPU-` or `MIG-`, then hex digits and dashes, 64
/// bytes at most. graft-driver, graft-mps and graft-nri's record policy all check this one.
pub fn is_device_uuid(s: &str) -> bool {
    s.len() <= 64
        && s.strip_prefix("GPU-")
            .or_else(|| s.strip_prefix("MIG-"))
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_uuids() {
        assert!(is_device_uuid("GPU-6a1f0000-93c1-4d4e-8f7b-0c5e2a900000"));
        assert!(is_device_uuid("MIG-0d2b0000-51a0-5b7e-9c3d-7e11f4a00000"));
        for bad in [
            "", "GPU-", "MIG-", "MIG-x1", "GPU-../x", "GPU-a/b", "gpu-1", "MIG/1", "..",
        ] {
            assert!(!is_device_uuid(bad), "{bad:?}");
        }
        assert!(!is_device_uuid(&format!("GPU-{}", "a".repeat(61))));
    }

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
