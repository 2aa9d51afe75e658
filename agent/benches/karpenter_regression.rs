//! Karpenter's regression suite (`test/suites/regression` of sigs.k8s.io/karpenter, the
//! version pinned in tools/go/karpenter-regression), its files unchanged, run for
//! Karpenter's KWOK controller and for joiner's agent (`--api karpenter --cloud kwok`), one
//! after the other, each on a fresh real control plane + KWOK with Karpenter's CRDs of the
//! same pin. Not a benchmark: a bench target so that it is built only when asked for
//! (`scripts/karpenter-regression`), never by the test suite.
//!
//! How each controller runs, and under which roles: `joiner_agent_world::karpenter_regression`.
//!
//! Prints one line per spec (passed, failed with its first failure line, or skipped) for
//! each controller, then the totals. Knobs: `CONTROLLERS=karpenter,joiner`, `FOCUS` and
//! `SKIP` (Ginkgo regular expressions over the spec's full text), `JOINER_REGRESSION_OUT`
//! (logs and reports; `target/karpenter-regression/<time>` by default).

use std::collections::BTreeMap;
use std::path::PathBuf;

use joiner_agent_world::karpenter_regression::{self as suite, Outcome, Selection, Suite};
use joiner_agent_world::kwok::{KarpenterBuild, Kind};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let controllers: Vec<Kind> = std::env::var("CONTROLLERS")
        .unwrap_or_else(|_| "karpenter,joiner".into())
        .split(',')
        .map(|c| match c.trim() {
            "karpenter" => Kind::Karpenter,
            "joiner" => Kind::Joiner,
            other => panic!("CONTROLLERS: unknown controller {other:?} (karpenter, joiner)"),
        })
        .collect();
    let tests = Suite::find().unwrap_or_else(|e| panic!("{e}"));
    let karpenter = controllers.contains(&Kind::Karpenter).then(karpenter_build);
    let select = Selection {
        focus: std::env::var("FOCUS").ok(),
        skip: std::env::var("SKIP").ok(),
    };
    let stamp = jiff::Timestamp::now().as_second();
    let out_root: PathBuf = std::env::var_os("JOINER_REGRESSION_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            joiner_test_support::workspace_root()
                .join(format!("target/karpenter-regression/{stamp}"))
        });
    eprintln!(
        "karpenter-regression: controllers {:?}, focus {:?}, logs in {}",
        controllers.iter().map(|k| k.name()).collect::<Vec<_>>(),
        select.focus.as_deref().unwrap_or_default(),
        out_root.display()
    );
    let mut columns: Vec<(Kind, BTreeMap<String, Outcome>)> = Vec::new();
    for kind in controllers {
        let out = out_root.join(kind.name());
        let outcomes = suite::run(kind, &tests, karpenter.as_ref(), &select, &out).await;
        for (spec, o) in &outcomes {
            eprintln!("karpenter-regression: {}: {} {spec}", kind.name(), o.state);
        }
        columns.push((kind, outcomes));
    }
    print_table(&columns);
}

/// Karpenter's KWOK controller of the regression pin.
fn karpenter_build() -> KarpenterBuild {
    if std::env::var_os("JOINER_KARPENTER_BIN").is_none() {
        std::env::set_var(
            "JOINER_KARPENTER_BIN",
            joiner_test_support::tools_dir().join("bin/karpenter-kwok-regression"),
        );
    }
    KarpenterBuild::find().unwrap_or_else(|e| {
        panic!("{e} (for this suite: scripts/install-tools.sh --go-karpenter-regression)")
    })
}

fn print_table(columns: &[(Kind, BTreeMap<String, Outcome>)]) {
    let specs: std::collections::BTreeSet<&String> =
        columns.iter().flat_map(|(_, c)| c.keys()).collect();
    let header: Vec<&str> = columns.iter().map(|(k, _)| k.name()).collect();
    println!("\n| spec | {} |", header.join(" | "));
    println!("|---|{}", "---|".repeat(columns.len()));
    for spec in &specs {
        let cells: Vec<String> = columns
            .iter()
            .map(|(_, c)| match c.get(*spec) {
                None => "not run".into(),
                Some(o) => match &o.failure {
                    Some(f) if o.state != "passed" && o.state != "skipped" => {
                        format!("{} ({:.0} s): {}", o.state, o.seconds, f.replace('|', "/"))
                    }
                    _ => format!("{} ({:.0} s)", o.state, o.seconds),
                },
            })
            .collect();
        println!("| {spec} | {} |", cells.join(" | "));
    }
    for (k, c) in columns {
        let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
        for o in c.values() {
            *by_state.entry(o.state.as_str()).or_default() += 1;
        }
        println!("{}: {by_state:?}", k.name());
    }
}
