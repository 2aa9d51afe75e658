//! `meta.k8s.io/v1` Table rendering, which `kubectl get` asks for (`Accept: ...;as=Table`)
//! to print its default columns.

use serde_json::{json, Value};

use crate::resources::ResourceType;

fn age(obj: &Value) -> String {
    let Some(ts) = obj["metadata"]["creationTimestamp"].as_str() else {
        return "<unknown>".into();
    };
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn column(name: &str, ty: &str) -> Value {
    json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": 0})
}

fn cond_status(obj: &Value, ty: &str) -> Option<String> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// Column definitions and cells for a kind, mirroring kubectl's familiar columns.
fn columns_and_cells(rt: &ResourceType, objs: &[&Value]) -> (Vec<Value>, Vec<Vec<Value>>) {
    let name = |o: &Value| json!(o["metadata"]["name"].as_str().unwrap_or(""));
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => (
            vec![
                column("Name", "string"),
                column("Ready", "string"),
                column("Status", "string"),
                column("Restarts", "integer"),
                column("Age", "string"),
                column("Node", "string"),
            ],
            objs.iter()
                .map(|o| {
                    let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                    let ready = o["status"]["containerStatuses"]
                        .as_array()
                        .map_or(0, |cs| cs.iter().filter(|c| c["ready"] == true).count());
                    let status = if o["metadata"].get("deletionTimestamp").is_some() {
                        "Terminating".to_string()
                    } else {
                        o["status"]["phase"]
                            .as_str()
                            .unwrap_or("Pending")
                            .to_string()
                    };
                    vec![
                        name(o),
                        json!(format!("{ready}/{total}")),
                        json!(status),
                        json!(0),
                        json!(age(o)),
                        json!(o["spec"]["nodeName"].as_str().unwrap_or("<none>")),
                    ]
                })
                .collect(),
        ),
        ("", "nodes") => (
            vec![
                column("Name", "string"),
                column("Status", "string"),
                column("Roles", "string"),
                column("Age", "string"),
                column("Version", "string"),
            ],
            objs.iter()
                .map(|o| {
                    let mut status = match cond_status(o, "Ready").as_deref() {
                        Some("True") => "Ready".to_string(),
                        _ => "NotReady".to_string(),
                    };
                    if o["spec"]["unschedulable"] == true {
                        status.push_str(",SchedulingDisabled");
                    }
                    vec![
                        name(o),
                        json!(status),
                        json!("<none>"),
                        json!(age(o)),
                        json!(o["status"]["nodeInfo"]["kubeletVersion"]
                            .as_str()
                            .unwrap_or("")),
                    ]
                })
                .collect(),
        ),
        ("apps", "deployments") => (
            vec![
                column("Name", "string"),
                column("Ready", "string"),
                column("Up-to-date", "integer"),
                column("Available", "integer"),
                column("Age", "string"),
            ],
            objs.iter()
                .map(|o| {
                    let st = &o["status"];
                    vec![
                        name(o),
                        json!(format!(
                            "{}/{}",
                            st["readyReplicas"].as_i64().unwrap_or(0),
                            o["spec"]["replicas"].as_i64().unwrap_or(0)
                        )),
                        json!(st["updatedReplicas"].as_i64().unwrap_or(0)),
                        json!(st["availableReplicas"].as_i64().unwrap_or(0)),
                        json!(age(o)),
                    ]
                })
                .collect(),
        ),
        ("", "namespaces") => (
            vec![
                column("Name", "string"),
                column("Status", "string"),
                column("Age", "string"),
            ],
            objs.iter()
                .map(|o| {
                    vec![
                        name(o),
                        json!(o["status"]["phase"].as_str().unwrap_or("Active")),
                        json!(age(o)),
                    ]
                })
                .collect(),
        ),
        _ => (
            vec![column("Name", "string"), column("Age", "string")],
            objs.iter().map(|o| vec![name(o), json!(age(o))]).collect(),
        ),
    }
}

/// Renders objects as a Table. `include_object` follows `?includeObject=`: `Object` embeds
/// the full object, anything else the PartialObjectMetadata kubectl uses for labels.
pub fn render(rt: &ResourceType, objs: &[&Value], list_meta: Value, include_object: &str) -> Value {
    let (cols, cells) = columns_and_cells(rt, objs);
    let rows: Vec<Value> = objs
        .iter()
        .zip(cells)
        .map(|(o, cells)| {
            let object = match include_object {
                "None" => Value::Null,
                "Object" => (*o).clone(),
                _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": cols,
        "rows": rows,
    })
}
