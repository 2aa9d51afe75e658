//! Turning the agent validator's field paths (`spec.template.spec.requirements[2].operator`)
//! into Terraform attribute paths (`requirement[2].operator`), so that every plan-time
//! error from the agent's own validation underlines the right line of the configuration.

use joiner_agent::api::validate::FieldError;

use crate::protocol::prelude::*;
use crate::protocol::value::PathStep;

/// How one resource's CRD field names map onto its attribute names.
pub struct PathMap {
    /// Path segments that have no attribute of their own (`spec`, `template`, ...).
    pub dropped: &'static [&'static str],
    /// CRD name -> attribute name, where it is not plain camelCase -> snake_case.
    pub renamed: &'static [(&'static str, &'static str)],
}

impl PathMap {
    pub fn translate(&self, agent_path: &str) -> AttributePath {
        let mut out = AttributePath::root();
        for step in tokenize(agent_path) {
            out = match step {
                Token::Field(f) => {
                    if self.dropped.contains(&f.as_str()) {
                        continue;
                    }
                    let name = self
                        .renamed
                        .iter()
                        .find(|(from, _)| *from == f)
                        .map(|(_, to)| to.to_string())
                        .unwrap_or_else(|| snake(&f));
                    out.attr(name)
                }
                Token::Index(i) => out.index(i),
                Token::Key(k) => out.key(k),
            };
        }
        out
    }

    /// The agent validator's errors about a `kind` as plan diagnostics at attribute paths.
    /// An error touching a value unknown at plan time is left out: it is checked again once
    /// the value is known. An error about the whole spec (two attributes that conflict)
    /// points at `root`'s attribute, and stands only when `root` says both are known.
    pub fn diagnostics(
        &self,
        kind: &str,
        errors: Vec<FieldError>,
        config: &Value,
        root: Option<(&str, bool)>,
    ) -> Diagnostics {
        let mut d = Diagnostics::new();
        for e in errors {
            let translated = self.translate(&e.path);
            let mut path = translated.clone();
            if let (true, Some((attr, known))) = (path.is_root(), root) {
                if !known {
                    continue;
                }
                path = AttributePath::new(attr);
            }
            if touches_unknown(config, &path) || unknown_source(config, &path) {
                continue;
            }
            // The detail names the attribute path too: Terraform underlines an attribute's
            // line, but for a nested block's path (`subnet_selector_term[0]`) it can only
            // point at the resource. The CRD's own path follows, for kubectl users.
            let detail = if translated.is_root() {
                e.message.clone()
            } else {
                format!("{translated}: {} ({})", e.message, e.path)
            };
            d.push(Diagnostic::error_at(
                path,
                format!("Invalid {kind}"),
                detail,
            ));
        }
        d
    }
}

enum Token {
    Field(String),
    Index(i64),
    Key(String),
}

fn tokenize(path: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = path.chars().peekable();
    let mut field = String::new();
    let flush = |field: &mut String, out: &mut Vec<Token>| {
        if !field.is_empty() {
            out.push(Token::Field(std::mem::take(field)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '.' => flush(&mut field, &mut out),
            '[' => {
                flush(&mut field, &mut out);
                if chars.peek() == Some(&'"') {
                    chars.next();
                    let mut key = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '\\' => {
                                if let Some(n) = chars.next() {
                                    key.push(n)
                                }
                            }
                            '"' => break,
                            c => key.push(c),
                        }
                    }
                    // the closing ]
                    chars.next();
                    out.push(Token::Key(key));
                } else {
                    let mut num = String::new();
                    for c in chars.by_ref() {
                        if c == ']' {
                            break;
                        }
                        num.push(c);
                    }
                    out.push(Token::Index(num.parse().unwrap_or(0)));
                }
            }
            c => field.push(c),
        }
    }
    flush(&mut field, &mut out);
    out
}

/// `httpProtocolIPv6` -> `http_protocol_ipv6`, `maxPods` -> `max_pods`.
pub fn snake(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let chars: Vec<char> = s.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && !chars[i - 1].is_ascii_uppercase();
            if i > 0 && prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(*c);
        }
    }
    out
}

/// An error about a value derived from something unknown (a whole block list unknown
/// reads as empty, so "at least one" errors must be dropped too).
fn unknown_source(config: &Value, path: &AttributePath) -> bool {
    match path.steps().first() {
        Some(PathStep::Attr(a)) => !config.get(a).is_fully_known(),
        _ => false,
    }
}

/// Whether anything on the way to `path` in `config` is unknown: such errors are dropped at
/// plan time and checked again once the value is known.
pub fn touches_unknown(config: &Value, path: &AttributePath) -> bool {
    let mut cur = config;
    if cur.is_unknown() {
        return true;
    }
    for i in 0..path.steps().len() {
        cur = config.at(&AttributePath(path.steps()[..=i].to_vec()));
        if cur.is_unknown() {
            return true;
        }
    }
    !cur.is_fully_known()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_to_snake() {
        assert_eq!(snake("httpProtocolIPv6"), "http_protocol_ipv6");
        assert_eq!(snake("maxPods"), "max_pods");
        assert_eq!(
            snake("httpPutResponseHopLimit"),
            "http_put_response_hop_limit"
        );
        assert_eq!(snake("key"), "key");
    }

    #[test]
    fn translates_paths() {
        let m = PathMap {
            dropped: &["spec", "template", "metadata"],
            renamed: &[("requirements", "requirement")],
        };
        assert_eq!(
            m.translate("spec.template.spec.requirements[2].minValues")
                .to_string(),
            "requirement[2].min_values"
        );
        assert_eq!(
            m.translate("spec.template.metadata.labels[\"a/b\"]")
                .to_string(),
            "labels[\"a/b\"]"
        );
    }
}
