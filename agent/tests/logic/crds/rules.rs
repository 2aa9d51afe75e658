//! The validation the CRDs carry (`joiner_agent::api::schema`): the table of bad objects
//! (`joiner_agent_world::crd_rules`, which the provider's plan is held to as well), each
//! refused by the agent's validator with the field it names, and, in `real_control_plane`,
//! by a real kube-apiserver naming the same field; good objects accepted by both. The CRDs
//! come from one place, so the API server and the agent enforce the same rules.

use joiner_agent::api::schema;
use joiner_agent_world::crd_rules::{good, table, Kind};
use serde_json::{json, Value};

/// The validation keywords a CRD carries: enums, patterns, CEL rules.
fn counts(v: &Value) -> (usize, usize, usize) {
    let mut c = (0, 0, 0);
    fn walk(v: &Value, c: &mut (usize, usize, usize)) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    match k.as_str() {
                        "enum" => c.0 += 1,
                        "pattern" => c.1 += 1,
                        "x-kubernetes-validations" => c.2 += x.as_array().map_or(0, Vec::len),
                        _ => {}
                    }
                    walk(x, c);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, c)),
            _ => {}
        }
    }
    walk(v, &mut c);
    c
}

#[test]
fn the_crds_carry_the_validators_rules() {
    let crds: Vec<Value> = schema::crds()
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    let mut total = (0, 0, 0);
    for c in &crds {
        let (e, p, r) = counts(c);
        let kind = c["spec"]["names"]["kind"].as_str().unwrap();
        println!("{kind}: {e} enums, {p} patterns, {r} CEL rules");
        assert!(
            e > 0 && p > 0 && r > 0,
            "{kind}: {e} enums, {p} patterns, {r} rules"
        );
        total = (total.0 + e, total.1 + p, total.2 + r);
    }
    assert!(total.0 >= 15 && total.1 >= 40 && total.2 >= 60, "{total:?}");
    let spec = |i: usize| {
        &crds[i]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    };
    let np = spec(0);
    let req = &np["properties"]["template"]["properties"]["spec"]["properties"]["requirements"];
    assert_eq!(
        req["items"]["properties"]["operator"]["enum"],
        json!(joiner_agent::requirements::OPERATORS
            .split(", ")
            .collect::<Vec<_>>())
    );
    assert_eq!(req["maxItems"], json!(100));
    let rules = req["items"]["x-kubernetes-validations"].to_string();
    for needle in [
        "['Gt', 'Lt', 'Gte', 'Lte']",
        "size(self.values) == 1",
        "size(self.values) >= self.minValues",
    ] {
        assert!(rules.contains(needle), "{needle} in {rules}");
    }
    assert_eq!(
        np["properties"]["disruption"]["properties"]["consolidationPolicy"]["enum"],
        json!(joiner_agent::api::validate::CONSOLIDATION_POLICIES)
    );
    let budgets = &np["properties"]["disruption"]["properties"]["budgets"];
    assert!(budgets["items"]["x-kubernetes-validations"]
        .to_string()
        .contains("!has(self.schedule) || has(self.duration)"));
    let claim = spec(2);
    assert_eq!(
        claim["x-kubernetes-validations"][0]["rule"],
        json!("self == oldSelf")
    );
    // The printed CRDs are these: the committed YAML (`crds_are_up_to_date`) and the agent's
    // `joiner-agent crds` come from `schema::crds` too.
    let yaml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds/joiner.dev_nodepools.yaml"),
    )
    .unwrap();
    assert!(yaml.contains("x-kubernetes-validations"));
}

#[test]
fn the_validator_refuses_every_bad_object_by_its_field() {
    let table = table();
    assert!(table.len() >= 40, "{} rows", table.len());
    for (kind, spec) in good() {
        assert_eq!(
            kind.validate(&spec),
            Vec::<String>::new(),
            "{kind:?} {spec}"
        );
    }
    let mut wrong = Vec::new();
    for b in &table {
        let errs = b.kind.validate(&b.spec());
        if !errs
            .iter()
            .any(|e| e.starts_with(b.field) && e.contains(b.says))
        {
            wrong.push(format!(
                "{:?} {}: no error at {} in {errs:?}",
                b.kind, b.what, b.field
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every CRD is taken from `api::schema`: the derived `crd()` alone has none of the rules.
#[test]
fn the_crds_come_from_one_place() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = ["agent", "provider", "tests"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(p) = stack.pop() {
        if p.ends_with("target") || p.ends_with("node_modules") || p.ends_with(".venv") {
            continue;
        }
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                stack.push(e.path());
            }
        } else if p.extension().is_some_and(|e| e == "rs") && !p.ends_with("api/schema.rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for kind in ["NodePool", "NodeClass", "NodeClaim", "NodeOverlay"] {
                if text.contains(&format!("{kind}::crd()")) {
                    found.push(format!("{}: {kind}::crd()", p.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "take the CRDs from joiner_agent::api::schema, which adds their validation: {found:#?}"
    );
}

/// The table on a real kube-apiserver: each bad object is stored when the CRDs carry no rules
/// (so the rules, not its shape, refuse it), then refused once they do, naming its field; the
/// good objects are accepted; a NodeClaim's spec and a NodePool's static/dynamic mode do not
/// change.
mod real_control_plane {
    use super::*;
    use joiner_control_plane::{ControlPlane, Options};

    /// The CRD without any validation keyword: what the derived schema alone says.
    fn without_rules(v: &mut Value) {
        match v {
            Value::Object(o) => {
                for k in [
                    "enum",
                    "pattern",
                    "minimum",
                    "maximum",
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                    "maxProperties",
                    "x-kubernetes-validations",
                ] {
                    o.remove(k);
                }
                o.values_mut().for_each(without_rules);
            }
            Value::Array(a) => a.iter_mut().for_each(without_rules),
            _ => {}
        }
    }

    fn install(cp: &ControlPlane, crds: Vec<Value>) {
        cp.install_crds(&crds)
            .unwrap_or_else(|e| panic!("the API server refuses the CRDs: {e:#}"));
    }

    fn create(
        cp: &ControlPlane,
        dir: &std::path::Path,
        kind: Kind,
        name: &str,
        spec: &Value,
    ) -> anyhow::Result<String> {
        let f = dir.join(format!("{name}.json"));
        let obj = json!({"apiVersion": "joiner.dev/v1", "kind": kind.name(),
            "metadata": {"name": name}, "spec": spec});
        std::fs::write(&f, obj.to_string()).unwrap();
        cp.kubectl(&["create", "-f", f.to_str().unwrap()])
    }

    fn delete_all(cp: &ControlPlane) {
        for k in [Kind::Pool, Kind::Class, Kind::Overlay, Kind::Claim] {
            cp.kubectl(&["delete", k.plural(), "--all", "--wait=true"])
                .unwrap();
        }
    }

    #[test]
    #[ignore = "the real control plane only: scripts/test runs it (`-- --ignored real_control_plane::`) once `scripts/install-tools.sh --go-cluster` has built it"]
    fn the_api_server_refuses_every_bad_object_naming_its_field() {
        let cp = ControlPlane::start(Options {
            controller_manager: false,
            scheduler: false,
            kwok: false,
            ..Default::default()
        })
        .expect("start the control plane");
        let dir = tempfile::tempdir().unwrap();
        let table = table();
        let validated: Vec<Value> = schema::crds()
            .into_iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();

        // Without the rules every bad object is stored: it is well-formed, only wrong.
        let mut bare = validated.clone();
        bare.iter_mut().for_each(without_rules);
        install(&cp, bare);
        for (i, b) in table.iter().enumerate() {
            create(&cp, dir.path(), b.kind, &format!("bad-{i}"), &b.spec()).unwrap_or_else(|e| {
                panic!(
                    "{:?} {}: refused even without the rules: {e:#}",
                    b.kind, b.what
                )
            });
        }
        delete_all(&cp);

        // With them, the good objects are stored and every bad one is refused by its field.
        install(&cp, validated);
        // The API server takes up a changed CRD's schema shortly after it is Established,
        // and nothing can be watched for that: probe each kind's first bad row until it is
        // refused.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut probed = Vec::new();
        for probe in &table {
            if probed.contains(&probe.kind) {
                continue;
            }
            probed.push(probe.kind);
            while create(&cp, dir.path(), probe.kind, "probe", &probe.spec()).is_ok() {
                cp.kubectl(&["delete", probe.kind.plural(), "probe"])
                    .unwrap();
                assert!(
                    std::time::Instant::now() < deadline,
                    "the new {:?} schema is never used",
                    probe.kind
                );
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
        }
        for (i, (kind, spec)) in good().into_iter().enumerate() {
            create(&cp, dir.path(), kind, &format!("good-{i}"), &spec)
                .unwrap_or_else(|e| panic!("{kind:?} refused: {e:#}\n{spec}"));
        }
        let mut wrong = Vec::new();
        for (i, b) in table.iter().enumerate() {
            match create(&cp, dir.path(), b.kind, &format!("bad-{i}"), &b.spec()) {
                Ok(_) => wrong.push(format!("{:?} {}: stored", b.kind, b.what)),
                Err(e) => {
                    let msg = format!("{e:#}");
                    if !msg.contains(b.field) || !msg.contains(b.says) {
                        wrong.push(format!(
                            "{:?} {}: {msg} does not name {} ({:?})",
                            b.kind, b.what, b.field, b.says
                        ));
                    } else {
                        println!(
                            "{:?} {}: {}",
                            b.kind,
                            b.what,
                            msg.lines().last().unwrap_or("")
                        );
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");

        // What only an update can do wrong: a NodeClaim's spec changes, a pool turns static.
        let claim = r#"{"spec": {"expireAfter": "1h"}}"#;
        let err = cp
            .kubectl(&[
                "patch",
                "nodeclaims.joiner.dev",
                "good-3",
                "--type=merge",
                "-p",
                claim,
            ])
            .expect_err("a NodeClaim's spec is immutable");
        assert!(format!("{err:#}").contains("spec is immutable"), "{err:#}");
        let err = cp
            .kubectl(&[
                "patch",
                "nodepools.joiner.dev",
                "good-0",
                "--type=merge",
                "-p",
                r#"{"spec": {"replicas": 3, "weight": null, "limits": null}}"#,
            ])
            .expect_err("a pool does not turn static");
        assert!(format!("{err:#}").contains("spec.replicas"), "{err:#}");
        // Metadata and status still change on a stored NodeClaim.
        cp.kubectl(&["label", "nodeclaims.joiner.dev", "good-3", "team=a"])
            .unwrap();
    }
}
