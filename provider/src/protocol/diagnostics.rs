//! Diagnostics: the errors and warnings Terraform shows the user, optionally pointing at an
//! attribute of the configuration.
//!
//! Every fallible resource method returns `Result<T, Diagnostics>`, and anything that converts
//! into a [`Diagnostic`] converts into [`Diagnostics`], so resource code can use `?` on its own
//! error types (e.g. the AWS error type implements `From<AwsError> for Diagnostic`).

use super::value::{AttributePath, Value};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub summary: String,
    pub detail: String,
    /// The attribute the problem is about; `None` for whole-resource problems.
    pub path: Option<AttributePath>,
}

impl Diagnostic {
    pub fn error(summary: impl Into<String>, detail: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            summary: summary.into(),
            detail: detail.into(),
            path: None,
        }
    }
    /// An error about one attribute, e.g.
    /// `Diagnostic::error_at("name", "Invalid queue name", "must be 1 to 80 characters")`.
    pub fn error_at(
        path: impl Into<AttributePath>,
        summary: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Diagnostic {
            path: Some(path.into()),
            ..Diagnostic::error(summary, detail)
        }
    }
    pub fn warning(summary: impl Into<String>, detail: impl Into<String>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(summary, detail)
        }
    }
    pub fn warning_at(
        path: impl Into<AttributePath>,
        summary: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Diagnostic {
            path: Some(path.into()),
            ..Diagnostic::warning(summary, detail)
        }
    }
    /// Re-anchors the diagnostic under `prefix` (used when validating nested blocks).
    pub fn under(mut self, prefix: &AttributePath) -> Self {
        let mut steps = prefix.0.clone();
        if let Some(p) = self.path.take() {
            steps.extend(p.0);
        }
        self.path = Some(AttributePath(steps));
        self
    }
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}: {}", self.summary)?;
        if let Some(p) = &self.path {
            write!(f, " (at {p})")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

/// A list of diagnostics; the error type of every resource method.
///
/// `partial_state` lets a failed create or update report what did get created (for example a
/// role whose policy attachment failed) so that Terraform records it as tainted instead of
/// losing track of a real object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diagnostics {
    pub items: Vec<Diagnostic>,
    pub partial_state: Option<Value>,
}

impl Diagnostics {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn push(&mut self, d: impl Into<Diagnostic>) {
        self.items.push(d.into());
    }
    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
        if other.partial_state.is_some() {
            self.partial_state = other.partial_state;
        }
    }
    pub fn error_at(
        &mut self,
        path: impl Into<AttributePath>,
        summary: impl Into<String>,
        detail: impl Into<String>,
    ) {
        self.items.push(Diagnostic::error_at(path, summary, detail));
    }
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }
    /// Records the object that exists despite the error (see the type's docs).
    pub fn with_partial_state(mut self, state: Value) -> Self {
        self.partial_state = Some(state);
        self
    }
    /// `Ok(v)` when there are no errors (warnings are dropped), else `Err(self)`.
    pub fn into_result<T>(self, v: T) -> Result<T, Diagnostics> {
        if self.has_errors() {
            Err(self)
        } else {
            Ok(v)
        }
    }
}

impl<T: Into<Diagnostic>> From<T> for Diagnostics {
    fn from(d: T) -> Self {
        Diagnostics {
            items: vec![d.into()],
            partial_state: None,
        }
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.items.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_mark_converts_single_diagnostic() {
        fn inner() -> Result<(), Diagnostics> {
            Err(Diagnostic::error_at("name", "bad", "worse"))?;
            Ok(())
        }
        let e = inner().unwrap_err();
        assert!(e.has_errors());
        assert_eq!(e.items[0].path, Some(AttributePath::new("name")));
        assert_eq!(e.to_string(), "error: bad (at name): worse");
    }

    #[test]
    fn under_prefixes_paths() {
        let d = Diagnostic::error_at("create", "x", "").under(&AttributePath::new("timeouts"));
        assert_eq!(d.path.unwrap().to_string(), "timeouts.create");
    }
}
