//! IAM policy documents as values.
//!
//! Built as typed statements rather than JSON templates so that conditions and resource
//! lists cannot be mis-quoted, and rendered deterministically (keys in a fixed order,
//! single values unwrapped from their list) so that the plan output is stable and the
//! size we check against IAM's quota is the size IAM will count.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

pub const POLICY_VERSION: &str = "2012-10-17";

/// Who a trust policy statement lets in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// An AWS service, e.g. `eks.amazonaws.com`.
    Service(String),
    /// An identity provider, e.g. an IAM OIDC provider ARN.
    Federated(String),
}

/// One statement; only `Allow` is needed by joiner (everything else is implicitly denied).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Statement {
    pub sid: Option<String>,
    pub principal: Option<Principal>,
    pub actions: Vec<String>,
    pub resources: Vec<String>,
    /// operator → key → values, e.g. `StringEquals → aws:RequestTag/x → [cluster]`.
    pub conditions: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

impl Statement {
    pub fn allow(sid: &str) -> Statement {
        Statement {
            sid: Some(sid.to_string()),
            ..Statement::default()
        }
    }

    pub fn principal(mut self, p: Principal) -> Statement {
        self.principal = Some(p);
        self
    }

    pub fn actions<I, S>(mut self, actions: I) -> Statement
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.actions.extend(actions.into_iter().map(Into::into));
        self
    }

    pub fn resources<I, S>(mut self, resources: I) -> Statement
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.resources.extend(resources.into_iter().map(Into::into));
        self
    }

    pub fn condition<I, S>(mut self, operator: &str, key: &str, values: I) -> Statement
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.conditions
            .entry(operator.to_string())
            .or_default()
            .entry(key.to_string())
            .or_default()
            .extend(values.into_iter().map(Into::into));
        self
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(sid) = &self.sid {
            m.insert("Sid".into(), Value::String(sid.clone()));
        }
        m.insert("Effect".into(), Value::String("Allow".into()));
        if let Some(p) = &self.principal {
            let (k, v) = match p {
                Principal::Service(s) => ("Service", s),
                Principal::Federated(f) => ("Federated", f),
            };
            let mut pm = Map::new();
            pm.insert(k.into(), Value::String(v.clone()));
            m.insert("Principal".into(), Value::Object(pm));
        }
        m.insert("Action".into(), one_or_many(&self.actions));
        if !self.resources.is_empty() {
            m.insert("Resource".into(), one_or_many(&self.resources));
        }
        if !self.conditions.is_empty() {
            let mut cm = Map::new();
            for (op, keys) in &self.conditions {
                let mut km = Map::new();
                for (k, vs) in keys {
                    km.insert(k.clone(), one_or_many(vs));
                }
                cm.insert(op.clone(), Value::Object(km));
            }
            m.insert("Condition".into(), Value::Object(cm));
        }
        Value::Object(m)
    }
}

/// IAM accepts a bare string wherever a one-element list is allowed; using it saves
/// characters against the size quota and reads better in the plan.
fn one_or_many(values: &[String]) -> Value {
    match values {
        [one] => Value::String(one.clone()),
        many => Value::Array(many.iter().cloned().map(Value::String).collect()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyDocument {
    pub statements: Vec<Statement>,
}

impl PolicyDocument {
    pub fn new(statements: Vec<Statement>) -> PolicyDocument {
        PolicyDocument { statements }
    }

    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("Version".into(), Value::String(POLICY_VERSION.into()));
        m.insert(
            "Statement".into(),
            Value::Array(self.statements.iter().map(Statement::to_json).collect()),
        );
        Value::Object(m)
    }

    /// Compact JSON, as sent to IAM and stored in state. Keys come out sorted (or in
    /// insertion order if some crate enables serde_json's `preserve_order`); either way the
    /// output is a pure function of the document.
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }

    /// The size IAM counts against its quotas: characters, whitespace excluded.
    pub fn quota_size(&self) -> usize {
        quota_size(&self.to_json())
    }
}

/// IAM's size rule: whitespace does not count towards the policy size quotas.
pub fn quota_size(json: &str) -> usize {
    json.chars().filter(|c| !c.is_whitespace()).count()
}

/// Parses a policy document returned by IAM (URL-encoded, any whitespace) into a
/// value that can be compared with [`PolicyDocument::to_value`]: single-element lists and
/// bare strings are equivalent to IAM, so both sides are normalised to lists.
pub fn normalize(json: &str) -> Option<Value> {
    let v: Value = serde_json::from_str(json).ok()?;
    Some(normalize_value(v, None))
}

fn normalize_value(v: Value, key: Option<&str>) -> Value {
    match (key, v) {
        // A lone statement object is the same as a list of one.
        (Some("Statement"), Value::Object(m)) => {
            Value::Array(vec![normalize_value(Value::Object(m), None)])
        }
        // Inside Condition: operator → key → value(s); every value is a list to IAM.
        (Some("Condition"), Value::Object(ops)) => Value::Object(
            ops.into_iter()
                .map(|(op, keys)| {
                    let keys = match keys {
                        Value::Object(k) => {
                            Value::Object(k.into_iter().map(|(k, v)| (k, as_list(v))).collect())
                        }
                        other => other,
                    };
                    (op, keys)
                })
                .collect(),
        ),
        (Some("Action" | "NotAction" | "Resource" | "NotResource"), v) => as_list(v),
        (_, Value::Object(m)) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let v = normalize_value(v, Some(&k));
                    (k, v)
                })
                .collect(),
        ),
        (_, Value::Array(a)) => {
            Value::Array(a.into_iter().map(|x| normalize_value(x, None)).collect())
        }
        (_, other) => other,
    }
}

fn as_list(v: Value) -> Value {
    match v {
        Value::Array(_) => v,
        other => Value::Array(vec![other]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_compact_deterministic_json() {
        let doc = PolicyDocument::new(vec![Statement::allow("A")
            .actions(["s3:GetObject"])
            .resources(["*"])
            .condition("StringEquals", "aws:ResourceTag/x", ["y"])]);
        let expected: Value = serde_json::from_str(
            r#"{"Version":"2012-10-17","Statement":[{"Sid":"A","Effect":"Allow","Action":"s3:GetObject","Resource":"*","Condition":{"StringEquals":{"aws:ResourceTag/x":"y"}}}]}"#,
        )
        .unwrap();
        let json = doc.to_json();
        assert!(!json.contains(' ') && !json.contains('\n'));
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), expected);
        assert_eq!(json, doc.to_json(), "rendering is deterministic");
        assert_eq!(doc.quota_size(), doc.to_json().len());
    }

    #[test]
    fn normalize_treats_single_values_as_lists() {
        let a = normalize(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"a:B","Resource":["*"],"Condition":{"StringEquals":{"k":"v"}}}]}"#,
        )
        .unwrap();
        let b = normalize(
            r#"{ "Version": "2012-10-17", "Statement": { "Effect": "Allow", "Action": ["a:B"], "Resource": "*", "Condition": {"StringEquals": {"k": ["v"]}} } }"#,
        )
        .unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn quota_size_ignores_whitespace() {
        assert_eq!(quota_size("{ \"a\" :\n\t\"b c\" }"), 10);
    }
}
