//! Rule names: `joiner-<cluster>-<kind>`, always within EventBridge's 64 characters.
//!
//! EventBridge names are 1-64 characters of `[.\-_A-Za-z0-9]`. Concatenating a cluster name
//! (up to 100 characters) with a suffix overflows that, which broke terraform-aws-eks for
//! long cluster names (#2311, #2416, #3553). We shorten the cluster part deterministically:
//! keep its head and append 8 hex characters of its SHA-256, so two long names sharing a
//! prefix still get different rules, and the same name always maps to the same rules (the
//! names are recomputed, never stored as the only copy).

use sha2::{Digest, Sha256};

use crate::policy::events::RuleKind;

pub const MAX_RULE_NAME: usize = 64;
const PREFIX: &str = "joiner-";
const HASH_LEN: usize = 8;

fn longest_suffix() -> usize {
    RuleKind::ALL
        .iter()
        .map(|k| k.suffix().len())
        .max()
        .unwrap_or(0)
}

/// The name part shared by all five rules of a cluster: `joiner-<cluster>` when it fits
/// with the longest suffix, otherwise `joiner-<head>-<hash8>`.
pub fn rule_prefix(cluster_name: &str) -> String {
    let budget = MAX_RULE_NAME - 1 - longest_suffix();
    let cleaned: String = cluster_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let plain = format!("{PREFIX}{cleaned}");
    if plain.len() <= budget && cleaned == cluster_name {
        return plain;
    }
    let digest = hex::encode(Sha256::digest(cluster_name.as_bytes()));
    let head_len = budget - PREFIX.len() - 1 - HASH_LEN;
    let head: String = cleaned.chars().take(head_len).collect();
    let head = head.trim_end_matches(['-', '_', '.']);
    format!("{PREFIX}{head}-{}", &digest[..HASH_LEN])
}

/// The rule name for one kind.
pub fn rule_name(cluster_name: &str, kind: RuleKind) -> String {
    format!("{}-{}", rule_prefix(cluster_name), kind.suffix())
}

/// EventBridge's rule-name alphabet.
pub fn is_valid_rule_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_RULE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn short_names_are_readable() {
        assert_eq!(
            rule_name("prod", RuleKind::SpotInterruption),
            "joiner-prod-spot-interruption"
        );
    }

    #[test]
    fn long_names_are_shortened_with_a_hash() {
        let long = "a".repeat(100);
        let name = rule_name(&long, RuleKind::CapacityReservationInterruption);
        assert!(name.len() <= 64, "{name} ({})", name.len());
        assert!(is_valid_rule_name(&name));
        assert_eq!(
            name,
            rule_name(&long, RuleKind::CapacityReservationInterruption)
        );
        let other = format!("{}b", "a".repeat(99));
        assert_ne!(rule_prefix(&long), rule_prefix(&other));
    }

    /// The example in docs/resources/interruption_rules.md.
    #[test]
    fn documented_example() {
        let name = format!("a{}", "-very-long-cluster-name".repeat(4));
        assert_eq!(
            rule_name(&name, RuleKind::SpotInterruption),
            "joiner-a-very-long-cluster-name-v-5455295a-spot-interruption"
        );
    }

    #[test]
    fn boundary_between_plain_and_hashed() {
        // 64 - 1 - 21 ("capacity-interruption") - 7 ("joiner-") = 35 characters fit as is.
        let fits = "c".repeat(35);
        assert_eq!(rule_prefix(&fits), format!("joiner-{fits}"));
        let over = "c".repeat(36);
        assert_ne!(rule_prefix(&over), format!("joiner-{over}"));
        assert_eq!(rule_prefix(&over).len(), 42);
    }

    proptest! {
        #[test]
        fn every_cluster_name_gives_valid_distinct_names(name in "[0-9A-Za-z][0-9A-Za-z_-]{0,99}") {
            let names: Vec<String> = RuleKind::ALL.iter().map(|k| rule_name(&name, *k)).collect();
            for n in &names {
                prop_assert!(is_valid_rule_name(n), "{}", n);
            }
            let unique: std::collections::BTreeSet<_> = names.iter().collect();
            prop_assert_eq!(unique.len(), 5);
        }
    }
}
