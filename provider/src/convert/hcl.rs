//! Just enough HCL to write resources a person will read and keep: attributes aligned as
//! `terraform fmt` aligns them, nested blocks, and comments where a field changed meaning.
//! Strings escape HCL's template sequences, so a manifest's `${CLUSTER_NAME}` can never
//! turn into an interpolation by accident (the converter substitutes the ones it knows).

use std::fmt::Write;

/// A value on the right of `=`.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A literal string, escaped when written.
    Str(String),
    /// An expression written as is (`var.cluster_name`, `"${var.x}-a"`).
    Raw(String),
    Int(i64),
    Bool(bool),
    List(Vec<Expr>),
    Map(Vec<(String, Expr)>),
}

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Attr(String, Expr),
    Block(Block),
    Comment(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    kind: String,
    labels: Vec<String>,
    items: Vec<Item>,
}

impl Block {
    pub fn new(kind: &str, labels: &[&str]) -> Block {
        Block {
            kind: kind.to_string(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
            items: Vec::new(),
        }
    }

    pub fn attr(&mut self, name: &str, value: Expr) -> &mut Self {
        self.items.push(Item::Attr(name.to_string(), value));
        self
    }

    pub fn block(&mut self, block: Block) -> &mut Self {
        self.items.push(Item::Block(block));
        self
    }

    /// A `#` comment line (or several, split on newlines) at this point of the block.
    pub fn comment(&mut self, text: &str) -> &mut Self {
        for line in text.lines() {
            self.items.push(Item::Comment(line.to_string()));
        }
        self
    }

    /// `type.name` of a `resource "type" "name"` block.
    pub fn address(&self) -> Option<String> {
        match (self.kind.as_str(), self.labels.as_slice()) {
            ("resource", [ty, name]) => Some(format!("{ty}.{name}")),
            _ => None,
        }
    }

    /// The literal `name = "..."` attribute, the object's name in the cluster.
    pub fn object_name(&self) -> Option<String> {
        self.items.iter().find_map(|i| match i {
            Item::Attr(n, Expr::Str(v)) if n == "name" => Some(v.clone()),
            _ => None,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        let pad = "  ".repeat(depth);
        let _ = write!(out, "{pad}{}", self.kind);
        for l in &self.labels {
            let _ = write!(out, " {}", quote(l));
        }
        out.push_str(" {\n");
        let inner = "  ".repeat(depth + 1);
        let mut i = 0;
        while i < self.items.len() {
            match &self.items[i] {
                Item::Comment(c) => {
                    let _ = writeln!(out, "{inner}# {c}");
                    i += 1;
                }
                Item::Block(b) => {
                    b.write(out, depth + 1);
                    i += 1;
                }
                Item::Attr(..) => {
                    // A run of consecutive attributes shares one column for `=`.
                    let run: Vec<(&String, &Expr)> = self.items[i..]
                        .iter()
                        .map_while(|it| match it {
                            Item::Attr(n, e) => Some((n, e)),
                            _ => None,
                        })
                        .collect();
                    let width = run.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
                    for (n, e) in &run {
                        let _ = writeln!(out, "{inner}{n:width$} = {}", expr(e));
                    }
                    i += run.len();
                }
            }
        }
        let _ = writeln!(out, "{pad}}}");
    }
}

fn expr(e: &Expr) -> String {
    match e {
        Expr::Str(s) => quote(s),
        Expr::Raw(r) => r.clone(),
        Expr::Int(n) => n.to_string(),
        Expr::Bool(b) => b.to_string(),
        Expr::List(items) => {
            let parts: Vec<String> = items.iter().map(expr).collect();
            format!("[{}]", parts.join(", "))
        }
        Expr::Map(entries) if entries.is_empty() => "{}".to_string(),
        Expr::Map(entries) => {
            let parts: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{} = {}", key(k), expr(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
    }
}

/// A map key: bare when it is an identifier, quoted otherwise (`"karpenter.sh/discovery"`).
fn key(k: &str) -> String {
    if is_identifier(k) {
        k.to_string()
    } else {
        quote(k)
    }
}

pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A quoted HCL string literal: backslash escapes, and `${`/`%{` doubled so that they stay
/// literal text.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A Terraform resource name from an object's name: `spot-fleet` stays, `2xl.pool` becomes
/// `_2xl_pool`.
pub fn identifier(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if !id.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        id.insert(0, '_');
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_stay_literal_and_quotes_escape() {
        assert_eq!(quote("a-${X}-%{y}"), r#""a-$${X}-%%{y}""#);
        assert_eq!(quote("say \"hi\"\n"), r#""say \"hi\"\n""#);
        assert_eq!(quote("$5 and 100%"), r#""$5 and 100%""#);
    }

    #[test]
    fn attributes_align_and_blocks_nest() {
        let mut b = Block::new("resource", &["joiner_node_pool", "default"]);
        b.attr("name", Expr::Str("default".into()))
            .attr("cluster_name", Expr::Raw("var.cluster_name".into()));
        let mut r = Block::new("requirement", &[]);
        r.attr("values", Expr::List(vec![Expr::Str("spot".into())]));
        b.comment("changed: x").block(r).attr(
            "labels",
            Expr::Map(vec![(
                "karpenter.sh/discovery".into(),
                Expr::Str("c".into()),
            )]),
        );
        assert_eq!(
            b.render(),
            "resource \"joiner_node_pool\" \"default\" {\n  name         = \"default\"\n  \
             cluster_name = var.cluster_name\n  # changed: x\n  requirement {\n    \
             values = [\"spot\"]\n  }\n  labels = { \"karpenter.sh/discovery\" = \"c\" }\n}\n"
        );
    }

    #[test]
    fn identifiers() {
        assert_eq!(identifier("spot-fleet"), "spot-fleet");
        assert_eq!(identifier("2XL.pool"), "_2xl_pool");
    }
}
