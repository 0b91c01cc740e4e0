//! Kubernetes quantities as the scheduler writes consumed capacity: a whole number with an
//! optional binary (`Ki`..`Ei`) or decimal (`k`..`E`) suffix. Fractions and exponents,
//! which graft never publishes for its capacities, are refused rather than guessed.

/// The quantity's value, or `None` when it is not a whole number graft understands.
pub fn parse(q: &str) -> Option<u128> {
    let q = q.trim();
    let digits = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, suffix) = q.split_at(digits);
    let n: u128 = n.parse().ok()?;
    let scale: u128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_quantities_with_suffixes() {
        assert_eq!(parse("40"), Some(40));
        assert_eq!(parse("30Gi"), Some(30 << 30));
        assert_eq!(parse("81559Mi"), Some(81559 << 20));
        assert_eq!(parse("2G"), Some(2_000_000_000));
        for bad in ["", "1.5Gi", "1e3", "-1", "Gi", "10Xi"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
