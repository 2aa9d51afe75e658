//! Kubernetes resource quantities (`250m`, `1.5`, `512Mi`, `1G`, `2e3`) as plain numbers.

/// Parses a quantity into base units (cores for CPU, bytes for memory, a count for pods).
pub fn parse(q: &str) -> Option<f64> {
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (s, mult) in SUFFIXES {
        if let Some(num) = q.strip_suffix(s) {
            return num.parse::<f64>().ok().map(|n| n * mult);
        }
    }
    q.parse::<f64>().ok()
}

/// A quantity from a JSON value, which may also be a bare number.
pub fn from_json(v: &serde_json::Value) -> Option<f64> {
    match v {
        serde_json::Value::String(s) => parse(s),
        serde_json::Value::Number(n) => n.as_f64(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_common_forms() {
        assert_eq!(super::parse("250m"), Some(0.25));
        assert_eq!(super::parse("2"), Some(2.0));
        assert_eq!(super::parse("512Mi"), Some(536870912.0));
        assert_eq!(super::parse("1G"), Some(1e9));
        assert_eq!(super::parse("1e3"), Some(1000.0));
        assert_eq!(super::parse("x"), None);
    }
}
