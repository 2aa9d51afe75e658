//! A NodeClass's launch templates, end to end through kube-sim and moto:
//! - a scale-out shares templates between claims (one per distinct set of launch inputs,
//!   not one per node: no two templates carry the same inputs);
//! - the agent puts its finalizer on the NodeClass; deleting the class waits while a
//!   NodeClaim uses it (and its NodePool stops launching), then its templates are deleted
//!   and the class is released, so nothing is left once the agent goes.

use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use joiner_agent::api::{NodeClaim, NodeClass, NodePool};
use joiner_agent_world::{sdk_config, wait_for, Opts, World};
use kube::api::{Api, DeleteParams};
use kube::ResourceExt;

/// This cluster's launch template names, as EC2 lists them.
async fn templates(w: &World) -> Vec<String> {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&w.moto.endpoint()).await);
    let out = ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:joiner.dev/cluster")
                .values(joiner_agent_world::CLUSTER)
                .build(),
        )
        // moto returns 15 without MaxResults, and no NextToken.
        .max_results(200)
        .send()
        .await
        .expect("DescribeLaunchTemplates");
    out.launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect()
}

/// Each named template's launch inputs: image, user data, and the resource types it tags.
async fn template_inputs(w: &World, names: &[String]) -> Vec<(String, String, Vec<String>)> {
    let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&w.moto.endpoint()).await);
    let mut out = Vec::new();
    for name in names {
        let v = ec2
            .describe_launch_template_versions()
            .launch_template_name(name)
            .send()
            .await
            .expect("DescribeLaunchTemplateVersions");
        let data = v.launch_template_versions()[0]
            .launch_template_data()
            .expect("template data")
            .clone();
        let mut tagged: Vec<String> = data
            .tag_specifications()
            .iter()
            .filter_map(|t| t.resource_type().map(|r| r.as_str().to_string()))
            .collect();
        tagged.sort();
        out.push((
            data.image_id().unwrap_or_default().to_string(),
            data.user_data().unwrap_or_default().to_string(),
            tagged,
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_are_shared_by_claims_and_deleted_with_their_node_class() {
    let w = World::start(Opts::default()).await;
    w.node_class("default").await;
    w.node_pool("default", World::general_pool_spec("default"))
        .await;
    let agent = w.agent(&[]).await;

    let classes: Api<NodeClass> = Api::all(w.client.clone());
    wait_for(
        "the NodeClass finalizer",
        Duration::from_secs(30),
        || async {
            let nc = classes.get("default").await.ok()?;
            nc.finalizers()
                .iter()
                .any(|f| f == "joiner.dev/termination")
                .then_some(())
        },
    )
    .await;

    // Enough pods for several nodes.
    w.deployment("web", 24, "1", "2Gi").await;
    wait_for("24 pods Running", Duration::from_secs(180), || async {
        (w.running("web").await == 24).then_some(())
    })
    .await;
    let claims = w.claims().await;
    let names = templates(&w).await;
    eprintln!(
        "{} claims, {} templates: {names:?}",
        claims.len(),
        names.len()
    );
    assert!(
        claims.len() >= 3,
        "the workload needs several nodes: {}",
        claims.len()
    );
    // One template per distinct set of launch inputs (image, user data with its labels,
    // taints and max pods, capacity kind): a claim whose launch needs a template another
    // already made reuses it, so no two templates carry the same inputs. (A launch over
    // types of several max-pods values makes one template per value.)
    let inputs = template_inputs(&w, &names).await;
    let distinct: std::collections::BTreeSet<_> = inputs.iter().collect();
    assert_eq!(
        distinct.len(),
        names.len(),
        "templates are shared: {} templates for {} claims, {} distinct inputs: {names:?}",
        names.len(),
        claims.len(),
        distinct.len()
    );
    assert!(names.iter().all(|n| n.starts_with("joiner/")), "{names:?}");

    // Delete the class while its claims live: it stays, and its pool is no longer served.
    classes
        .delete("default", &DeleteParams::default())
        .await
        .expect("delete NodeClass");
    let pools: Api<NodePool> = Api::all(w.client.clone());
    wait_for(
        "the NodePool reports its class is being deleted",
        Duration::from_secs(30),
        || async {
            let p = pools.get("default").await.ok()?;
            let conds = p.status?.conditions;
            conds
                .iter()
                .any(|c| {
                    c.type_ == "Ready" && c.status == "False" && c.message.contains("being deleted")
                })
                .then_some(())
        },
    )
    .await;
    // The agent has looked at the deleted class and decided to wait for its claims.
    wait_for(
        "the NodeClass waits on its NodeClaims",
        Duration::from_secs(30),
        || async {
            w.events_for("default", "default")
                .await
                .iter()
                .any(|e| e.starts_with("WaitingOnNodeClaimTermination"))
                .then_some(())
        },
    )
    .await;
    let held = classes.get("default").await.expect("class still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        !templates(&w).await.is_empty(),
        "templates stay while claims use them"
    );

    // The claims go; then the templates, then the class.
    w.scale("web", 0).await;
    let api: Api<NodeClaim> = Api::all(w.client.clone());
    for c in &claims {
        let _ = api.delete(&c.name_any(), &DeleteParams::default()).await;
    }
    wait_for(
        "claims gone, templates deleted, NodeClass released",
        Duration::from_secs(120),
        || async {
            let claims = w.claims().await.len();
            let left = templates(&w).await.len();
            let class = classes.get_opt("default").await.ok()?;
            (claims == 0 && left == 0 && class.is_none()).then_some(())
        },
    )
    .await;
    agent.stop().await.expect("graceful stop");
}
