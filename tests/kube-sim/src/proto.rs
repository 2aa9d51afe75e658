//! Just enough of Kubernetes' protobuf encoding to accept the bodies kubectl's typed
//! clients send (`kubectl create namespace|configmap|secret|serviceaccount`, and the
//! DeleteOptions/Eviction some commands post). kube-sim answers in JSON, which those
//! clients also accept. Bodies of other kinds are refused with 415 and a clear message.

use base64::Engine;
use serde_json::{json, Map, Value};

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn next(&mut self) -> Option<Option<(u64, Field<'a>)>> {
        if self.pos >= self.buf.len() {
            return Some(None);
        }
        let key = self.varint()?;
        let (num, wire) = (key >> 3, key & 7);
        let f = match wire {
            0 => Field::Varint(self.varint()?),
            2 => {
                let len = self.varint()? as usize;
                let s = self.buf.get(self.pos..self.pos.checked_add(len)?)?;
                self.pos += len;
                Field::Bytes(s)
            }
            1 => {
                self.pos += 8;
                Field::Fixed
            }
            5 => {
                self.pos += 4;
                Field::Fixed
            }
            _ => return None,
        };
        Some(Some((num, f)))
    }
}

fn fields(buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut r = Reader { buf, pos: 0 };
    let mut out = Vec::new();
    while let Some(f) = r.next()? {
        out.push(f);
    }
    Some(out)
}

fn string(b: &[u8]) -> Value {
    json!(String::from_utf8_lossy(b))
}

/// A map<string, string> (or bytes, base64-encoded as in JSON) entry.
fn map_entry(b: &[u8], bytes_value: bool) -> Option<(String, Value)> {
    let mut k = String::new();
    let mut v = Value::String(String::new());
    for (n, f) in fields(b)? {
        if let Field::Bytes(x) = f {
            match n {
                1 => k = String::from_utf8_lossy(x).into_owned(),
                2 if bytes_value => v = json!(base64::engine::general_purpose::STANDARD.encode(x)),
                2 => v = string(x),
                _ => {}
            }
        }
    }
    Some((k, v))
}

fn object_meta(b: &[u8]) -> Option<Value> {
    let mut m = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Bytes(x)) => {
                m.insert("name".into(), string(x));
            }
            (2, Field::Bytes(x)) => {
                m.insert("generateName".into(), string(x));
            }
            (3, Field::Bytes(x)) => {
                m.insert("namespace".into(), string(x));
            }
            (6, Field::Bytes(x)) => {
                m.insert("resourceVersion".into(), string(x));
            }
            (11, Field::Bytes(x)) => {
                let (k, v) = map_entry(x, false)?;
                labels.insert(k, v);
            }
            (12, Field::Bytes(x)) => {
                let (k, v) = map_entry(x, false)?;
                annotations.insert(k, v);
            }
            (14, Field::Bytes(x)) => finalizers.push(string(x)),
            _ => {}
        }
    }
    // gogo-protobuf writes empty strings too; JSON clients omit them.
    m.retain(|_, v| v.as_str() != Some(""));
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), Value::Array(finalizers));
    }
    Some(Value::Object(m))
}

fn delete_options(b: &[u8]) -> Option<Value> {
    let mut o = Map::new();
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Varint(v)) => {
                o.insert("gracePeriodSeconds".into(), json!(v as i64));
            }
            (2, Field::Bytes(x)) => {
                let mut pre = Map::new();
                for (pn, pf) in fields(x)? {
                    if let Field::Bytes(px) = pf {
                        pre.insert(
                            if pn == 1 { "uid" } else { "resourceVersion" }.into(),
                            string(px),
                        );
                    }
                }
                o.insert("preconditions".into(), Value::Object(pre));
            }
            (4, Field::Bytes(x)) => {
                o.insert("propagationPolicy".into(), string(x));
            }
            _ => {}
        }
    }
    Some(Value::Object(o))
}

fn label_selector(b: &[u8]) -> Option<Value> {
    let mut ml = Map::new();
    for (n, f) in fields(b)? {
        if let (1, Field::Bytes(x)) = (n, f) {
            let (k, v) = map_entry(x, false)?;
            ml.insert(k, v);
        }
    }
    Some(json!({"matchLabels": ml}))
}

fn container(b: &[u8]) -> Option<Value> {
    let mut c = Map::new();
    let mut ports = Vec::new();
    let mut command = Vec::new();
    let mut args = Vec::new();
    for (n, f) in fields(b)? {
        let Field::Bytes(x) = f else { continue };
        match n {
            1 => {
                c.insert("name".into(), string(x));
            }
            2 => {
                c.insert("image".into(), string(x));
            }
            3 => command.push(string(x)),
            4 => args.push(string(x)),
            6 => {
                let mut p = Map::new();
                for (pn, pf) in fields(x)? {
                    match (pn, pf) {
                        (1, Field::Bytes(v)) => {
                            p.insert("name".into(), string(v));
                        }
                        (3, Field::Varint(v)) => {
                            p.insert("containerPort".into(), json!(v as i64));
                        }
                        (4, Field::Bytes(v)) => {
                            p.insert("protocol".into(), string(v));
                        }
                        _ => {}
                    }
                }
                p.retain(|_, v| v.as_str() != Some(""));
                p.entry("protocol").or_insert_with(|| json!("TCP"));
                ports.push(Value::Object(p));
            }
            8 => {
                c.insert("resources".into(), json!({}));
            }
            _ => {}
        }
    }
    if !ports.is_empty() {
        c.insert("ports".into(), Value::Array(ports));
    }
    if !command.is_empty() {
        c.insert("command".into(), Value::Array(command));
    }
    if !args.is_empty() {
        c.insert("args".into(), Value::Array(args));
    }
    Some(Value::Object(c))
}

/// The part of a Deployment `kubectl create deployment` sends: replicas, selector, and a
/// template with labels and containers (name, image, command, args, ports).
fn deployment_spec(b: &[u8]) -> Option<Value> {
    let mut spec = json!({});
    for (n, f) in fields(b)? {
        match (n, f) {
            (1, Field::Varint(v)) => spec["replicas"] = json!(v as i64),
            (2, Field::Bytes(x)) => spec["selector"] = label_selector(x)?,
            (3, Field::Bytes(x)) => {
                let mut template = json!({"metadata": {}, "spec": {"containers": []}});
                for (tn, tf) in fields(x)? {
                    match (tn, tf) {
                        (1, Field::Bytes(m)) => template["metadata"] = object_meta(m)?,
                        (2, Field::Bytes(ps)) => {
                            let mut containers = Vec::new();
                            for (pn, pf) in fields(ps)? {
                                if let (2, Field::Bytes(cx)) = (pn, pf) {
                                    containers.push(container(cx)?);
                                }
                            }
                            template["spec"]["containers"] = Value::Array(containers);
                        }
                        _ => {}
                    }
                }
                spec["template"] = template;
            }
            _ => {}
        }
    }
    Some(spec)
}

/// Decodes a `k8s\0`-prefixed protobuf body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\x00")
        .ok_or("protobuf body without the k8s magic prefix")?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, f) in fields(rest).ok_or("malformed protobuf envelope")? {
        match (n, f) {
            (1, Field::Bytes(tm)) => {
                for (tn, tf) in fields(tm).ok_or("malformed typeMeta")? {
                    if let Field::Bytes(x) = tf {
                        match tn {
                            1 => api_version = String::from_utf8_lossy(x).into_owned(),
                            2 => kind = String::from_utf8_lossy(x).into_owned(),
                            _ => {}
                        }
                    }
                }
            }
            (2, Field::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    let unsupported = || {
        format!("kube-sim decodes protobuf bodies only for Namespace, ConfigMap, Secret, ServiceAccount, Deployment (as kubectl create deployment sends it), DeleteOptions and Eviction (got {api_version} {kind}); send JSON")
    };
    let mut obj = json!({"apiVersion": api_version, "kind": kind});
    let top = fields(raw).ok_or("malformed protobuf object")?;
    for (n, f) in top {
        let Field::Bytes(x) = f else {
            if let (Field::Varint(v), "ConfigMap" | "Secret", 4 | 5) = (&f, kind.as_str(), n) {
                if (kind == "ConfigMap" && n == 4) || (kind == "Secret" && n == 5) {
                    obj["immutable"] = json!(*v != 0);
                }
            }
            continue;
        };
        match (kind.as_str(), n) {
            ("DeleteOptions", _) => {
                return delete_options(raw)
                    .map(|mut o| {
                        o["apiVersion"] = json!(api_version);
                        o["kind"] = json!(kind);
                        o
                    })
                    .ok_or_else(|| "malformed DeleteOptions".to_string())
            }
            (_, 1) => obj["metadata"] = object_meta(x).ok_or("malformed metadata")?,
            ("Deployment", 2) => {
                obj["spec"] = deployment_spec(x).ok_or("malformed Deployment spec")?
            }
            ("Deployment", 3) => {}
            ("Eviction", 2) => {
                obj["deleteOptions"] = delete_options(x).ok_or("malformed deleteOptions")?
            }
            ("Namespace", 2) => obj["spec"] = json!({}),
            ("Namespace", 3) => {}
            ("ConfigMap", 2) | ("ConfigMap", 3) | ("Secret", 2) | ("Secret", 4) => {
                let field = match (kind.as_str(), n) {
                    ("ConfigMap", 2) => "data",
                    ("ConfigMap", _) => "binaryData",
                    ("Secret", 2) => "data",
                    _ => "stringData",
                };
                let bytes_value = field == "binaryData" || (kind == "Secret" && n == 2);
                let (k, v) = map_entry(x, bytes_value).ok_or("malformed map entry")?;
                if !obj[field].is_object() {
                    obj[field] = json!({});
                }
                obj[field][k] = v;
            }
            ("Secret", 3) => obj["type"] = string(x),
            ("ServiceAccount", 2) | ("ServiceAccount", 3) => {}
            _ => return Err(unsupported()),
        }
    }
    if !matches!(
        kind.as_str(),
        "Namespace"
            | "ConfigMap"
            | "Secret"
            | "ServiceAccount"
            | "Deployment"
            | "Eviction"
            | "DeleteOptions"
    ) {
        return Err(unsupported());
    }
    Ok(obj)
}
