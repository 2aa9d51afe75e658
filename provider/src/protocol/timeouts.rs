//! Per-resource operation timeouts, configured in a `timeouts { create = "30m" }` block.
//!
//! A resource declares its defaults with `Resource::timeouts()`; the server then adds the
//! block to the schema, validates the durations at plan time, and bounds each operation.

use super::diagnostics::Diagnostic;
use super::schema::{Attribute, Block, NestedBlock};
use super::value::{AttributePath, Value};
use std::time::Duration;

pub const BLOCK_NAME: &str = "timeouts";

/// Default durations per operation; `None` means the operation has no timeout attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timeouts {
    pub create: Option<Duration>,
    pub read: Option<Duration>,
    pub update: Option<Duration>,
    pub delete: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Read,
    Update,
    Delete,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Create => "create",
            Operation::Read => "read",
            Operation::Update => "update",
            Operation::Delete => "delete",
        }
    }
}

impl Timeouts {
    fn default_for(&self, op: Operation) -> Option<Duration> {
        match op {
            Operation::Create => self.create,
            Operation::Read => self.read,
            Operation::Update => self.update,
            Operation::Delete => self.delete,
        }
    }

    fn ops(&self) -> impl Iterator<Item = Operation> + '_ {
        [
            Operation::Create,
            Operation::Read,
            Operation::Update,
            Operation::Delete,
        ]
        .into_iter()
        .filter(|op| self.default_for(*op).is_some())
    }

    /// The `timeouts` block added to the resource schema.
    pub fn block(&self) -> NestedBlock {
        let mut b = Block::new().description("Operation timeouts, e.g. \"30m\" or \"1h30m\".");
        for op in self.ops() {
            let d = self.default_for(op).unwrap_or_default();
            b = b.attribute(Attribute::string(op.name()).optional().description(format!(
                "How long to wait for {} (default {}).",
                op.name(),
                format_duration(d)
            )));
        }
        NestedBlock::single(BLOCK_NAME, b)
    }

    /// Checks every duration in the configured block; errors point at `timeouts.<op>`.
    pub fn validate(&self, config: &Value) -> Vec<Diagnostic> {
        let block = config.get(BLOCK_NAME);
        self.ops()
            .filter_map(|op| {
                let s = block.get(op.name()).as_str()?;
                parse_duration(s).err().map(|e| {
                    Diagnostic::error_at(
                        AttributePath::new(BLOCK_NAME).attr(op.name()),
                        "Invalid timeout",
                        e,
                    )
                })
            })
            .collect()
    }

    /// The effective timeout for `op`, from the object's `timeouts` block or the default.
    pub fn effective(&self, value: &Value, op: Operation) -> Option<Duration> {
        let configured = value
            .get(BLOCK_NAME)
            .get(op.name())
            .as_str()
            .and_then(|s| parse_duration(s).ok());
        configured.or(self.default_for(op))
    }
}

/// Parses Go-style durations as Terraform users write them: "90s", "10m", "1h30m", "1.5h".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("{s:?} is not a duration; use a number with a unit (s, m or h), e.g. \"30m\" or \"1h30m\"")
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let mult = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += n * mult;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > 366.0 * 86400.0 {
        return Err(format!("{s:?} is too long; at most one year"));
    }
    Ok(Duration::from_secs_f64(total))
}

pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, 0) => format!("{h}h{m}m"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["", "10", "m", "10x", "1h-2m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
    }

    #[test]
    fn effective_and_validate() {
        let t = Timeouts {
            create: Some(Duration::from_secs(600)),
            delete: Some(Duration::from_secs(60)),
            ..Timeouts::default()
        };
        let v = Value::object([(BLOCK_NAME, Value::object([("create", "2m".into())]))]);
        assert_eq!(
            t.effective(&v, Operation::Create),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            t.effective(&v, Operation::Delete),
            Some(Duration::from_secs(60))
        );
        assert_eq!(t.effective(&v, Operation::Update), None);
        let bad = Value::object([(BLOCK_NAME, Value::object([("delete", "soon".into())]))]);
        let d = t.validate(&bad);
        assert_eq!(d[0].path.as_ref().unwrap().to_string(), "timeouts.delete");
        assert_eq!(t.block().block.attributes.len(), 2);
    }
}
