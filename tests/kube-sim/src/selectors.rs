//! Label and field selectors, in both their query-string form (`?labelSelector=a=b,c in (d)`)
//! and the structured `LabelSelector` form used by Deployments, PDBs and topology spread.

use serde_json::Value;

use crate::status::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq)]
pub enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Requirement {
    pub fn matches(&self, labels: &Value) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        match self {
            Requirement::Eq(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEq(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        }
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(s: &str) -> Option<Vec<String>> {
    let s = s.trim();
    let inner = s.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect(),
    )
}

/// Parses `?labelSelector=`.
pub fn parse_label_selector(s: &str) -> ApiResult<Vec<Requirement>> {
    let mut reqs = Vec::new();
    for part in split_top(s) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let bad = || {
            ApiError::bad_request(format!("unable to parse requirement: found '{part}', expected: identifier, '!', '=', '==', '!=', 'in' or 'notin'"))
        };
        let req = if let Some(k) = part.strip_prefix('!') {
            Requirement::NotExists(k.trim().to_string())
        } else if let Some((k, v)) = part.split_once("!=") {
            Requirement::NotEq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once("==") {
            Requirement::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = part.split_once('=') {
            Requirement::Eq(k.trim().into(), v.trim().into())
        } else if let Some(idx) = part.find(" notin ") {
            Requirement::NotIn(
                part[..idx].trim().into(),
                parse_set(&part[idx + 7..]).ok_or_else(bad)?,
            )
        } else if let Some(idx) = part.find(" in ") {
            Requirement::In(
                part[..idx].trim().into(),
                parse_set(&part[idx + 4..]).ok_or_else(bad)?,
            )
        } else if part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            Requirement::Exists(part.to_string())
        } else {
            return Err(bad());
        };
        reqs.push(req);
    }
    Ok(reqs)
}

/// Converts a structured `LabelSelector` (matchLabels, matchExpressions).
pub fn structured_selector(sel: &Value) -> Result<Vec<Requirement>, String> {
    let mut reqs = Vec::new();
    if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in ml {
            reqs.push(Requirement::Eq(
                k.clone(),
                v.as_str().unwrap_or("").to_string(),
            ));
        }
    }
    if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
        for e in exprs {
            let key = e["key"].as_str().unwrap_or("").to_string();
            let values: Vec<String> = e["values"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            reqs.push(match e["operator"].as_str().unwrap_or("") {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::NotExists(key),
                op => return Err(format!("{op:?} is not a valid label selector operator")),
            });
        }
    }
    Ok(reqs)
}

/// Whether a structured selector matches a label map. An empty selector matches everything.
pub fn label_selector_matches(sel: &Value, labels: &Value) -> Result<bool, String> {
    Ok(structured_selector(sel)?.iter().all(|r| r.matches(labels)))
}

pub fn labels_match(reqs: &[Requirement], obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    reqs.iter().all(|r| r.matches(labels))
}

/// One `?fieldSelector=` term.
#[derive(Debug, Clone)]
pub struct FieldReq {
    pub path: String,
    pub value: String,
    pub negate: bool,
}

/// The field selectors the real server supports for the types kube-sim serves.
const FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "status.phase",
    "spec.unschedulable",
    "spec.schedulerName",
    "status.podIP",
    "involvedObject.name",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.uid",
    "type",
    "reason",
];

pub fn parse_field_selector(s: &str) -> ApiResult<Vec<FieldReq>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (path, value, negate) = if let Some((k, v)) = part.split_once("!=") {
            (k, v, true)
        } else if let Some((k, v)) = part.split_once("==") {
            (k, v, false)
        } else if let Some((k, v)) = part.split_once('=') {
            (k, v, false)
        } else {
            return Err(ApiError::bad_request(format!(
                "invalid selector: '{part}'; can't understand '{part}'"
            )));
        };
        let path = path.trim();
        if !FIELDS.contains(&path) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {path}"
            )));
        }
        out.push(FieldReq {
            path: path.to_string(),
            value: value.trim().to_string(),
            negate,
        });
    }
    Ok(out)
}

pub fn fields_match(reqs: &[FieldReq], obj: &Value) -> bool {
    reqs.iter().all(|r| {
        let mut cur = obj;
        for seg in r.path.split('.') {
            cur = &cur[seg];
        }
        let actual = match cur {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Null if r.path == "spec.unschedulable" => "false".into(),
            Value::Null => String::new(),
            v => v.to_string(),
        };
        (actual == r.value) != r.negate
    })
}

/// Selectors from a request, applied to list and watch.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub labels: Vec<Requirement>,
    pub fields: Vec<FieldReq>,
}

impl Filter {
    pub fn matches(&self, obj: &Value) -> bool {
        labels_match(&self.labels, obj) && fields_match(&self.fields, obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_set_based_selectors() {
        let r = parse_label_selector("app=web,tier in (a, b),!legacy,env notin (dev)").unwrap();
        assert_eq!(r.len(), 4);
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "b", "env": "prod"}}});
        assert!(labels_match(&r, &obj));
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "c"}}});
        assert!(!labels_match(&r, &obj));
    }

    #[test]
    fn field_selectors_reject_unknown_fields() {
        assert!(parse_field_selector("spec.foo=bar").is_err());
        let f = parse_field_selector("spec.nodeName=n1,status.phase!=Failed").unwrap();
        assert!(fields_match(
            &f,
            &json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
        ));
        assert!(!fields_match(
            &f,
            &json!({"spec": {"nodeName": "n2"}, "status": {"phase": "Running"}})
        ));
    }
}
