//! Go-style durations (`720h`, `1h30m`, `30s`) as Kubernetes and Karpenter write them.

/// Parses a duration into seconds (fractions of a second are rounded down). `Never` is
/// not a duration: callers that accept it check for it first.
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(0);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {s:?}: missing unit"))?;
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let mult = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => {
                return Err(format!(
                    "invalid duration {s:?}: unknown unit {u:?} (use ns, us, ms, s, m, h)"
                ))
            }
        };
        total += n * mult;
        rest = &rest[unit_end..];
    }
    Ok(total as u64)
}

/// A duration that may also be `Never`: None for Never.
pub fn parse_or_never(s: &str) -> Result<Option<u64>, String> {
    if s == "Never" {
        Ok(None)
    } else {
        parse_seconds(s).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_seconds("720h").unwrap(), 720 * 3600);
        assert_eq!(parse_seconds("1h30m").unwrap(), 5400);
        assert_eq!(parse_seconds("0s").unwrap(), 0);
        assert_eq!(parse_seconds("1.5s").unwrap(), 1);
        assert_eq!(parse_or_never("Never").unwrap(), None);
        assert!(parse_seconds("10").is_err());
        assert!(parse_seconds("10d").unwrap_err().contains("unknown unit"));
        assert!(parse_seconds("h").is_err());
    }
}
