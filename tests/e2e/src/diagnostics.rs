//! Diagnostics as Terraform reports them in its machine-readable UI (`-json`).
//!
//! Terraform turns a provider's attribute path into a source range and prints the line it
//! points at (`on main.tf line 3, in resource ...:` / `3:   name = ""`). The JSON stream
//! carries the same range and snippet, without the line wrapping of the human output, so
//! checks that "the error names the attribute" look at the snippet Terraform chose.

use serde_json::Value;
use std::fmt;

/// One diagnostic from `terraform plan -json` (or apply).
#[derive(Debug, Clone, Default)]
pub struct Diagnostic {
    pub severity: String,
    pub summary: String,
    pub detail: String,
    /// The resource address, when Terraform knows it (`joiner_interruption_queue.q`).
    pub address: Option<String>,
    /// File and line of the range Terraform attributed the diagnostic to.
    pub file: Option<String>,
    pub line: Option<u64>,
    /// The source line(s) Terraform shows under the message.
    pub code: Option<String>,
    /// The exact part of `code` Terraform highlights.
    pub highlight: Option<String>,
}

impl Diagnostic {
    /// Parses every diagnostic from a `-json` stream, skipping other messages.
    pub fn parse_stream(stream: &str) -> Vec<Diagnostic> {
        stream
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "diagnostic")
            .map(|v| Diagnostic::from_json(&v["diagnostic"]))
            .collect()
    }

    fn from_json(d: &Value) -> Diagnostic {
        let s = |v: &Value| v.as_str().map(str::to_string);
        let code = s(&d["snippet"]["code"]);
        let highlight = code.as_ref().and_then(|code| {
            let start = d["snippet"]["highlight_start_offset"].as_u64()? as usize;
            let end = d["snippet"]["highlight_end_offset"].as_u64()? as usize;
            code.get(start..end).map(str::to_string)
        });
        Diagnostic {
            severity: s(&d["severity"]).unwrap_or_default(),
            summary: s(&d["summary"]).unwrap_or_default(),
            detail: s(&d["detail"]).unwrap_or_default(),
            address: s(&d["address"]),
            file: s(&d["range"]["filename"]),
            line: d["range"]["start"]["line"].as_u64(),
            code,
            highlight,
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == "error"
    }

    /// Summary and detail together, whitespace collapsed.
    pub fn message(&self) -> String {
        collapse(&format!("{} {}", self.summary, self.detail))
    }

    /// True when the message contains `text` (whitespace-insensitive).
    pub fn mentions(&self, text: &str) -> bool {
        self.message().contains(&collapse(text))
    }

    /// The attribute name on the source line Terraform pointed at, e.g. `name` for
    /// `name = ""`. `None` when Terraform pointed at the whole block, which is what
    /// happens when the provider sent no attribute path.
    pub fn attribute(&self) -> Option<String> {
        let first = self.code.as_deref()?.lines().next()?.trim();
        let (key, _) = first.split_once('=')?;
        let key = key.trim();
        let is_ident = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        is_ident.then(|| key.to_string())
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.severity, self.summary)?;
        if let Some(addr) = &self.address {
            writeln!(f, "  with {addr},")?;
        }
        if let (Some(file), Some(line)) = (&self.file, self.line) {
            writeln!(f, "  on {file} line {line}:")?;
        }
        if let Some(code) = &self.code {
            writeln!(f, "  | {}", code.replace('\n', "\n  | "))?;
        }
        if !self.detail.is_empty() {
            writeln!(f, "  {}", self.detail.replace('\n', "\n  "))?;
        }
        Ok(())
    }
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shape taken from Terraform 1.0.3's `plan -json` output.
    const STREAM: &str = r#"{"@level":"info","@message":"Terraform 1.0.3","type":"version"}
{"@level":"error","@message":"Error: Invalid name","diagnostic":{"severity":"error","summary":"Invalid name","detail":"must be 1 to 80\ncharacters","address":"joiner_interruption_queue.q","range":{"filename":"main.tf","start":{"line":2,"column":10,"byte":50},"end":{"line":2,"column":12,"byte":52}},"snippet":{"context":"resource \"joiner_interruption_queue\" \"q\"","code":"  name = \"\"","start_line":2,"highlight_start_offset":9,"highlight_end_offset":11,"values":[]}},"type":"diagnostic"}
{"@level":"error","@message":"Error: Whole block","diagnostic":{"severity":"error","summary":"Whole block","detail":"","range":{"filename":"main.tf","start":{"line":1,"column":1,"byte":0},"end":{"line":1,"column":40,"byte":39}},"snippet":{"context":null,"code":"resource \"joiner_interruption_queue\" \"q\" {","start_line":1,"highlight_start_offset":0,"highlight_end_offset":39,"values":[]}},"type":"diagnostic"}"#;

    #[test]
    fn parses_attribute_and_message() {
        let d = Diagnostic::parse_stream(STREAM);
        assert_eq!(d.len(), 2);
        assert!(d[0].is_error());
        assert_eq!(d[0].attribute().as_deref(), Some("name"));
        assert_eq!(d[0].highlight.as_deref(), Some("\"\""));
        assert_eq!(d[0].line, Some(2));
        assert!(d[0].mentions("must be 1 to 80 characters"));
        assert_eq!(d[1].attribute(), None, "a block header names no attribute");
    }
}
