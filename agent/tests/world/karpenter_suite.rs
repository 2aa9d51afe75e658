//! A part of Karpenter's own regression suite (`sigs.k8s.io/karpenter` v1.14.0,
//! `test/suites/regression`, its files unchanged) in `./scripts/test`: the specs that run in
//! a few minutes, against the agent serving Karpenter's API under the roles `joiner_agent`
//! renders for `api = "karpenter"`, on a real control plane + KWOK. The whole suite, for
//! both controllers, is `scripts/karpenter-regression` (docs/karpenter-parity.md).
//!
//! Not a `real_control_plane` module: it needs the compiled suite as well as the control
//! plane (`scripts/install-tools.sh --go-karpenter-suite`), and scripts/test runs it once
//! that is built (`-- --ignored karpenter_suite::`).

use joiner_agent_world::karpenter_regression::{self as suite, Selection, Suite};
use joiner_agent_world::kwok::Kind;

/// Ginkgo's focus: Termination / Emptiness / Budgets (an empty node kept while a budget
/// blocks it, at all times or in a scheduled window).
const FOCUS: &str = "Termination Emptiness Budgets";
const SPECS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the control plane and Karpenter's compiled regression suite: scripts/test runs it (`-- --ignored karpenter_suite::`) once `scripts/install-tools.sh --go-karpenter-suite` has built it"]
async fn karpenters_emptiness_specs_pass_against_the_agent() {
    let tests = Suite::find().unwrap_or_else(|e| panic!("{e}"));
    let out = std::env::temp_dir().join(format!("joiner-karpenter-suite-{}", std::process::id()));
    let select = Selection {
        focus: Some(FOCUS.into()),
        skip: None,
    };
    let outcomes = suite::run(Kind::Joiner, &tests, None, &select, &out).await;
    let ran: Vec<_> = outcomes
        .iter()
        .filter(|(_, o)| o.state != "skipped")
        .collect();
    assert_eq!(
        ran.len(),
        SPECS,
        "Karpenter's suite ran {} specs for the focus {FOCUS:?}, not {SPECS} (logs in {})",
        ran.len(),
        out.display()
    );
    let failed: Vec<String> = ran
        .iter()
        .filter(|(_, o)| o.state != "passed")
        .map(|(spec, o)| format!("{spec}: {} {}", o.state, o.failure.as_deref().unwrap_or("")))
        .collect();
    assert!(
        failed.is_empty(),
        "Karpenter's specs failed against the agent (suite and agent logs in {}):\n{}",
        out.display(),
        failed.join("\n")
    );
}
