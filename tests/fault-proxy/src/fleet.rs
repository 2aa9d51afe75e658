//! Per-override errors for CreateFleet type `instant` (insufficient capacity, quotas, an
//! unsupported offering, a subnet without addresses...), which the emulator cannot produce.
//!
//! Real EC2 answers an instant fleet whose overrides cannot be launched with HTTP 200, the
//! launched instances (if any) in `fleetInstanceSet` and one `errorSet` item per failed
//! override (its error code and message, with the override echoed back). The proxy
//! removes the overrides a rule fails from the request, forwards the rest (the emulator
//! launches the first remaining override) and adds the error items to the answer; when no
//! override is left it answers by itself, with errors and no instance.

use std::collections::BTreeMap;

use crate::form::xml_escape;

/// One override of the request, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// 1-based index of its `LaunchTemplateConfigs` entry.
    pub config: u32,
    /// Its fields (`InstanceType`, `SubnetId`, `AvailabilityZone`, ...).
    pub fields: BTreeMap<String, String>,
}

impl Override {
    pub fn instance_type(&self) -> &str {
        self.fields
            .get("InstanceType")
            .map(String::as_str)
            .unwrap_or("")
    }
}

/// The capacity type a CreateFleet request asks for (`spot` or `on-demand`).
pub fn capacity_type(params: &[(String, String)]) -> String {
    params
        .iter()
        .find(|(k, _)| k == "TargetCapacitySpecification.DefaultTargetCapacityType")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "on-demand".into())
}

/// Splits the request into its overrides and the other parameters.
pub fn overrides(params: &[(String, String)]) -> (Vec<Override>, Vec<(String, String)>) {
    let mut found: BTreeMap<(u32, u32), Override> = BTreeMap::new();
    let mut rest = Vec::new();
    for (k, v) in params {
        match parse_override_key(k) {
            Some((c, n, field)) => {
                found
                    .entry((c, n))
                    .or_insert_with(|| Override {
                        config: c,
                        fields: BTreeMap::new(),
                    })
                    .fields
                    .insert(field.to_string(), v.clone());
            }
            None => rest.push((k.clone(), v.clone())),
        }
    }
    (found.into_values().collect(), rest)
}

fn parse_override_key(k: &str) -> Option<(u32, u32, &str)> {
    let r = k.strip_prefix("LaunchTemplateConfigs.")?;
    let (c, r) = r.split_once('.')?;
    let r = r.strip_prefix("Overrides.")?;
    let (n, field) = r.split_once('.')?;
    Some((c.parse().ok()?, n.parse().ok()?, field))
}

/// Rebuilds the request with only `kept` overrides, renumbered from 1 within each config.
/// Configs left without overrides are dropped (and the remaining ones renumbered) so the
/// emulator does not fall back to launching the template's own instance type.
pub fn rebuild(rest: &[(String, String)], kept: &[Override]) -> Vec<(String, String)> {
    let live: Vec<u32> = {
        let mut v: Vec<u32> = kept.iter().map(|o| o.config).collect();
        v.dedup();
        v
    };
    let renumber = |c: u32| live.iter().position(|x| *x == c).map(|i| i as u32 + 1);
    let mut out = Vec::new();
    for (k, v) in rest {
        if let Some(r) = k.strip_prefix("LaunchTemplateConfigs.") {
            let (c, tail) = r.split_once('.').unwrap_or((r, ""));
            match c.parse::<u32>().ok().and_then(renumber) {
                Some(n) => out.push((format!("LaunchTemplateConfigs.{n}.{tail}"), v.clone())),
                None => continue,
            }
        } else {
            out.push((k.clone(), v.clone()));
        }
    }
    let mut counters: BTreeMap<u32, u32> = BTreeMap::new();
    for o in kept {
        let c = renumber(o.config).unwrap_or(1);
        let n = counters.entry(c).or_default();
        *n += 1;
        for (f, v) in &o.fields {
            out.push((
                format!("LaunchTemplateConfigs.{c}.Overrides.{n}.{f}"),
                v.clone(),
            ));
        }
    }
    out
}

/// The `errorSet` items for the overrides that failed, each with its error code.
pub fn error_items(
    params: &[(String, String)],
    failed: &[(Override, String)],
    lifecycle: &str,
) -> String {
    let mut out = String::new();
    for (o, code) in failed {
        let spec_field = |f: &str| {
            let key = format!(
                "LaunchTemplateConfigs.{}.LaunchTemplateSpecification.{f}",
                o.config
            );
            params
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        };
        let mut spec = String::new();
        for (f, tag) in [
            ("LaunchTemplateId", "launchTemplateId"),
            ("LaunchTemplateName", "launchTemplateName"),
            ("Version", "version"),
        ] {
            if let Some(v) = spec_field(f) {
                spec.push_str(&format!("<{tag}>{}</{tag}>", xml_escape(&v)));
            }
        }
        let mut fields = String::new();
        for (f, v) in &o.fields {
            let tag = lower_first(f);
            fields.push_str(&format!("<{tag}>{}</{tag}>", xml_escape(v)));
        }
        let zone = o
            .fields
            .get("AvailabilityZone")
            .cloned()
            .unwrap_or_else(|| "the requested zone".into());
        let message = if code == "InsufficientInstanceCapacity" {
            format!(
                "We currently do not have sufficient {} capacity in the Availability Zone \
                 you requested ({zone}). (injected by fault-proxy)",
                o.instance_type()
            )
        } else {
            format!(
                "{code} for {} in {zone} (injected by fault-proxy)",
                o.instance_type()
            )
        };
        out.push_str(&format!(
            "<item><launchTemplateAndOverrides><launchTemplateSpecification>{spec}\
             </launchTemplateSpecification><overrides>{fields}</overrides>\
             </launchTemplateAndOverrides><lifecycle>{lifecycle}</lifecycle>\
             <errorCode>{}</errorCode><errorMessage>{}</errorMessage></item>",
            xml_escape(code),
            xml_escape(&message),
        ));
    }
    out
}

/// Adds error items to the emulator's CreateFleet answer.
pub fn inject_errors(body: &str, items: &str) -> String {
    if let Some(i) = body.find("<errorSet>") {
        let at = i + "<errorSet>".len();
        return format!("{}{items}{}", &body[..at], &body[at..]);
    }
    if body.contains("<errorSet/>") {
        return body.replacen("<errorSet/>", &format!("<errorSet>{items}</errorSet>"), 1);
    }
    match body.rfind("</CreateFleetResponse>") {
        Some(i) => format!("{}<errorSet>{items}</errorSet>{}", &body[..i], &body[i..]),
        None => body.to_string(),
    }
}

/// A whole CreateFleet answer with errors only: nothing was launched.
pub fn errors_only_response(items: &str, fleet_no: u64) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CreateFleetResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>fault-proxy-{fleet_no}\
         </requestId><fleetId>fleet-faultproxy{fleet_no:08x}</fleetId><errorSet>{items}\
         </errorSet><fleetInstanceSet/></CreateFleetResponse>"
    )
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(k: &str, v: &str) -> (String, String) {
        (k.into(), v.into())
    }

    #[test]
    fn removes_and_renumbers_overrides() {
        let params = vec![
            p("Action", "CreateFleet"),
            p(
                "LaunchTemplateConfigs.1.LaunchTemplateSpecification.LaunchTemplateId",
                "lt-1",
            ),
            p(
                "LaunchTemplateConfigs.1.Overrides.1.InstanceType",
                "c5.large",
            ),
            p("LaunchTemplateConfigs.1.Overrides.1.SubnetId", "subnet-a"),
            p(
                "LaunchTemplateConfigs.1.Overrides.2.InstanceType",
                "m5.large",
            ),
            p("LaunchTemplateConfigs.1.Overrides.2.SubnetId", "subnet-a"),
            p(
                "TargetCapacitySpecification.DefaultTargetCapacityType",
                "spot",
            ),
        ];
        let (all, rest) = overrides(&params);
        assert_eq!(all.len(), 2);
        assert_eq!(capacity_type(&params), "spot");
        let kept: Vec<Override> = all
            .iter()
            .filter(|o| o.instance_type() != "c5.large")
            .cloned()
            .collect();
        let out = rebuild(&rest, &kept);
        assert!(out.contains(&p(
            "LaunchTemplateConfigs.1.Overrides.1.InstanceType",
            "m5.large"
        )));
        assert!(!out.iter().any(|(_, v)| v == "c5.large"));
        let failed: Vec<(Override, String)> = all
            .into_iter()
            .filter(|o| o.instance_type() == "c5.large")
            .map(|o| (o, "VcpuLimitExceeded".to_string()))
            .collect();
        let items = error_items(&params, &failed, "spot");
        assert!(items.contains("<instanceType>c5.large</instanceType>"));
        assert!(items.contains("<errorCode>VcpuLimitExceeded</errorCode>"));
        assert!(items.contains("<launchTemplateId>lt-1</launchTemplateId>"));
        let body = inject_errors(
            "<CreateFleetResponse><fleetId>f</fleetId></CreateFleetResponse>",
            &items,
        );
        assert!(body.contains("<errorSet><item>"));
    }
}
