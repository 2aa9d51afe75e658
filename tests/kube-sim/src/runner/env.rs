//! A container's environment as the kubelet builds it: the image's variables, the service
//! variables, then the pod spec's `envFrom` and `env` in order, with `$(VAR)` references
//! expanded against what is already defined, and downward API `fieldRef`s.

use std::collections::BTreeMap;

use serde_json::Value;

/// Kubernetes' `$(VAR)` expansion: a defined name is replaced, `$$` is a literal `$`, and
/// anything else (an undefined name, an unclosed reference) is kept as written.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// An ordered environment: later definitions replace earlier ones in place.
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: Vec<(String, String)>,
}

impl Env {
    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        let value = value.into();
        match self.vars.iter_mut().find(|(k, _)| k == name) {
            Some(slot) => slot.1 = value,
            None => self.vars.push((name.to_string(), value)),
        }
    }

    /// Sets the variable only when the pod or image did not.
    pub fn set_default(&mut self, name: &str, value: impl Into<String>) {
        if self.get(name).is_none() {
            self.set(name, value);
        }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn expand(&self, s: &str) -> String {
        expand(s, &|n| self.get(n).map(str::to_string))
    }
}

/// Reads a `key` of a ConfigMap or Secret (`data` already decoded for Secrets).
pub type ObjectLookup<'a> = dyn Fn(&str, &str) -> Option<BTreeMap<String, String>> + 'a;

/// The value of a downward API `fieldRef` path for this pod.
pub fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let meta = &pod["metadata"];
    let quoted = |prefix: &str| -> Option<String> {
        let rest = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(rest.to_string())
    };
    if let Some(k) = quoted("metadata.labels['") {
        return meta["labels"][&k].as_str().map(str::to_string);
    }
    if let Some(k) = quoted("metadata.annotations['") {
        return meta["annotations"][&k].as_str().map(str::to_string);
    }
    let v = match path {
        "metadata.name" => &meta["name"],
        "metadata.namespace" => &meta["namespace"],
        "metadata.uid" => &meta["uid"],
        "spec.nodeName" => &pod["spec"]["nodeName"],
        "spec.serviceAccountName" => &pod["spec"]["serviceAccountName"],
        "status.podIP" => &pod["status"]["podIP"],
        "status.hostIP" => &pod["status"]["hostIP"],
        _ => return None,
    };
    v.as_str().map(str::to_string)
}

/// Applies the container's `envFrom` and `env` on top of `env` (which holds the image's and
/// the service variables). Returns the problems a kubelet would report as
/// CreateContainerConfigError (a missing ConfigMap, Secret or key that is not optional).
pub fn apply_container_env(
    env: &mut Env,
    pod: &Value,
    container: &Value,
    config_maps: &ObjectLookup<'_>,
    secrets: &ObjectLookup<'_>,
) -> Result<(), String> {
    if let Some(sources) = container["envFrom"].as_array() {
        for src in sources {
            let prefix = src["prefix"].as_str().unwrap_or("");
            let (r, lookup, kind) = if src["configMapRef"].is_object() {
                (&src["configMapRef"], config_maps, "configmap")
            } else if src["secretRef"].is_object() {
                (&src["secretRef"], secrets, "secret")
            } else {
                continue;
            };
            let name = r["name"].as_str().unwrap_or("");
            match lookup(name, kind) {
                Some(data) => {
                    for (k, v) in data {
                        env.set(&format!("{prefix}{k}"), v);
                    }
                }
                None if r["optional"] == true => {}
                None => return Err(format!("{kind} \"{name}\" not found")),
            }
        }
    }
    if let Some(vars) = container["env"].as_array() {
        for var in vars {
            let Some(name) = var["name"].as_str() else {
                continue;
            };
            if let Some(v) = var["value"].as_str() {
                let expanded = env.expand(v);
                env.set(name, expanded);
                continue;
            }
            let from = &var["valueFrom"];
            if from.is_null() {
                env.set(name, "");
                continue;
            }
            if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
                match field_ref(pod, path) {
                    Some(v) => env.set(name, v),
                    None if path.starts_with("metadata.labels[")
                        || path.starts_with("metadata.annotations[") =>
                    {
                        env.set(name, "")
                    }
                    None => {
                        return Err(format!(
                            "env {name}: unsupported or empty fieldRef {path:?}"
                        ))
                    }
                }
                continue;
            }
            let (r, lookup, kind) = if from["configMapKeyRef"].is_object() {
                (&from["configMapKeyRef"], config_maps, "configmap")
            } else if from["secretKeyRef"].is_object() {
                (&from["secretKeyRef"], secrets, "secret")
            } else if from["resourceFieldRef"].is_object() {
                // Limits and requests are not modelled for processes: report none set.
                env.set(name, "0");
                continue;
            } else {
                return Err(format!("env {name}: unsupported valueFrom {from}"));
            };
            let obj = r["name"].as_str().unwrap_or("");
            let key = r["key"].as_str().unwrap_or("");
            match lookup(obj, kind).and_then(|d| d.get(key).cloned()) {
                Some(v) => env.set(name, v),
                None if r["optional"] == true => {}
                None => return Err(format!("couldn't find key {key} in {kind} \"{obj}\"")),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lookup_in<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        let l = lookup_in(&[("POD_IP", "127.3.0.2"), ("A", "x")]);
        assert_eq!(expand("$(POD_IP):8080", &l), "127.3.0.2:8080");
        assert_eq!(expand("$(MISSING)-$(A)", &l), "$(MISSING)-x");
        assert_eq!(expand("$$(A)", &l), "$(A)");
        assert_eq!(expand("$(A", &l), "$(A");
        assert_eq!(expand("cost: $5 é $(A)", &l), "cost: $5 é x");
        assert_eq!(expand("trailing $", &l), "trailing $");
    }

    #[test]
    fn env_values_expand_against_earlier_definitions_only() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}}, "status": {"podIP": "127.9.0.1"}});
        let c = json!({"env": [
            {"name": "LATER_REF", "value": "$(POD_IP)"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ADDR", "value": "$(POD_IP):8081"},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
        ]});
        let cms = |name: &str, _: &str| {
            (name == "cfg").then(|| BTreeMap::from([("k".to_string(), "v".to_string())]))
        };
        let none = |_: &str, _: &str| None;
        let mut env = Env::default();
        apply_container_env(&mut env, &pod, &c, &cms, &none).unwrap();
        assert_eq!(env.get("LATER_REF"), Some("$(POD_IP)"));
        assert_eq!(env.get("ADDR"), Some("127.9.0.1:8081"));
        assert_eq!(env.get("NS"), Some("ns"));
        assert_eq!(env.get("APP"), Some("a"));
        assert_eq!(env.get("CM"), Some("v"));
    }

    #[test]
    fn a_missing_required_secret_is_a_config_error() {
        let pod = json!({"metadata": {"name": "p"}});
        let c = json!({"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]});
        let none = |_: &str, _: &str| None;
        let err = apply_container_env(&mut Env::default(), &pod, &c, &none, &none).unwrap_err();
        assert!(err.contains("secret \"nope\""), "{err}");
        let c = json!({"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}}]});
        let mut env = Env::default();
        apply_container_env(&mut env, &pod, &c, &none, &none).unwrap();
        assert_eq!(env.get("S"), None);
    }
}
