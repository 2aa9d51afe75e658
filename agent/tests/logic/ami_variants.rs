//! Which image each instance type launches from under an AMI alias, over the whole
//! catalogue (the emulator's instance types, `agent/fixtures/ec2-instance-types.json`), for
//! both families and both architectures: a GPU type never gets the standard image (it has no
//! NVIDIA driver), an Inferentia or Trainium type always gets one with the Neuron driver
//! (AL2023's `neuron` image, Bottlerocket's standard x86_64 image), and every other type the
//! standard image. Karpenter's `amifamily/al2023.go` and `bottlerocket.go` map the variants
//! so; the EKS user guide's "Use EKS-optimized accelerated AMIs for GPU instances" lists the
//! same images per instance family.

use joiner_agent::catalog::{Ec2Dump, InstanceTypeRecord};
use joiner_agent::cloud::ami::{alias_parameters, AmiVariant, ResolvedAmis, ResolvedImage};
use joiner_agent::cloud::user_data::AmiFamily;

fn fixture() -> Vec<InstanceTypeRecord> {
    let json = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ec2-instance-types.json"),
    )
    .expect("fixture");
    let dump: Ec2Dump = serde_json::from_str(&json).expect("fixture parses");
    dump.instance_types
}

/// What an alias resolves to when every parameter it reads is published: each image's ID is
/// the parameter's name, so the choice names the parameter it came from.
fn resolved(alias: &str, family: AmiFamily) -> ResolvedAmis {
    ResolvedAmis {
        family,
        images: alias_parameters(alias, "1.33")
            .unwrap()
            .into_iter()
            .map(|p| ResolvedImage {
                id: p.name,
                arch: p.arch,
                variants: Some(p.variants),
            })
            .collect(),
    }
}

fn neuron(r: &InstanceTypeRecord) -> bool {
    r.accelerator_count > 0 && r.accelerator_manufacturer == "AWS"
}

#[test]
fn accelerated_types_never_launch_from_the_standard_image() {
    let records = fixture();
    for (alias, family) in [
        ("al2023@latest", AmiFamily::Al2023),
        ("bottlerocket@latest", AmiFamily::Bottlerocket),
    ] {
        let amis = resolved(alias, family);
        // (kind, architecture) pairs seen, so that the test knows what it covered.
        let mut seen = std::collections::BTreeSet::new();
        for r in &records {
            let Some(arch) = ["x86_64", "arm64"]
                .into_iter()
                .find(|a| r.architectures.iter().any(|x| x == a))
            else {
                continue;
            };
            let image = amis
                .image_for(r)
                .unwrap_or_else(|| panic!("{alias}: no image for {} ({arch})", r.name));
            let variants = image.variants.clone().unwrap_or_default();
            let (kind, wanted) = if r.gpu_count > 0 {
                ("gpu", AmiVariant::Nvidia)
            } else if neuron(r) {
                ("neuron", AmiVariant::Neuron)
            } else if r.accelerator_count > 0 {
                // Another maker's inference accelerator (dl2q's Qualcomm AI100): Karpenter's
                // requirement is the accelerator label, so the Neuron variant is chosen.
                ("other accelerator", AmiVariant::Neuron)
            } else {
                ("ordinary", AmiVariant::Standard)
            };
            seen.insert((kind, image.arch.clone()));
            assert!(
                variants.contains(&wanted),
                "{alias}: {} ({kind}, {arch}) launches from {} ({variants:?}), not a {wanted:?} image",
                r.name,
                image.id
            );
            if kind == "gpu" {
                assert!(
                    image.id.contains("nvidia") && !variants.contains(&AmiVariant::Standard),
                    "{alias}: GPU type {} launches from {}",
                    r.name,
                    image.id
                );
            }
            if kind == "neuron" && family == AmiFamily::Al2023 {
                assert!(
                    image.id.contains("/neuron/"),
                    "{alias}: {} launches from {}",
                    r.name,
                    image.id
                );
            }
            if kind == "ordinary" {
                assert!(
                    !image.id.contains("nvidia") && !image.id.contains("neuron"),
                    "{alias}: {} launches from {}",
                    r.name,
                    image.id
                );
            }
        }
        for want in [
            ("gpu", "x86_64"),
            ("gpu", "arm64"),
            ("neuron", "x86_64"),
            ("ordinary", "x86_64"),
            ("ordinary", "arm64"),
        ] {
            assert!(
                seen.contains(&(want.0, want.1.to_string())),
                "{alias}: the catalogue has no {want:?} type: {seen:?}"
            );
        }
    }
}

/// The status lists each image with the requirements of the types it serves, as
/// Karpenter's `status.amis` does: the same requirement decides the launch.
#[test]
fn the_status_lists_each_variant_with_its_requirements() {
    let amis = resolved("bottlerocket@latest", AmiFamily::Bottlerocket);
    let status = amis.status();
    let line = |i: usize| {
        let a = &status[i];
        let reqs: Vec<String> = a
            .requirements
            .iter()
            .map(|r| format!("{} {} {:?}", r.key, r.operator, r.values))
            .collect();
        (a.id.clone(), reqs.join("; "))
    };
    assert_eq!(
        status.len(),
        5,
        "the x86_64 standard image serves two kinds"
    );
    assert_eq!(
        line(0),
        (
            "/aws/service/bottlerocket/aws-k8s-1.33/x86_64/latest/image_id".to_string(),
            "kubernetes.io/arch In [\"amd64\"]; karpenter.k8s.aws/instance-gpu-count DoesNotExist []; \
             karpenter.k8s.aws/instance-accelerator-count DoesNotExist []"
                .to_string()
        )
    );
    assert_eq!(
        line(1).1,
        "kubernetes.io/arch In [\"amd64\"]; karpenter.k8s.aws/instance-accelerator-count Exists []"
    );
    assert_eq!(
        line(4),
        (
            "/aws/service/bottlerocket/aws-k8s-1.33-nvidia/arm64/latest/image_id".to_string(),
            "kubernetes.io/arch In [\"arm64\"]; karpenter.k8s.aws/instance-gpu-count Exists []"
                .to_string()
        )
    );
    // The requirements agree with the choice: each type's labels meet those of its image.
    for r in fixture() {
        let Some(image) = amis.image_for(&r) else {
            continue;
        };
        let labels = r.labels();
        let met = status.iter().filter(|a| a.id == image.id).any(|a| {
            a.requirements.iter().all(|q| match q.operator.as_str() {
                "In" => {
                    q.key != "kubernetes.io/arch" || {
                        let arch = if image.arch == "x86_64" {
                            "amd64"
                        } else {
                            "arm64"
                        };
                        q.values.iter().any(|v| v == arch)
                    }
                }
                "Exists" => labels.contains_key(&q.key),
                "DoesNotExist" => !labels.contains_key(&q.key),
                other => panic!("operator {other}"),
            })
        });
        assert!(
            met,
            "{}: labels do not meet {}'s requirements",
            r.name, image.id
        );
    }
}
