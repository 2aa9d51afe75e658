//! Every committed seed of every fuzz target, and a few thousand seeded mutations of them,
//! through the same code the libFuzzer binaries run. Not coverage-guided (that build is over
//! an hour cold on 2 cores; `scripts/fuzz` runs it by hand), but it runs in every `cargo test`:
//! a seed or a past crash that starts failing again fails the suite, and so does a target
//! added without seeds or a seed directory without a target.
//!
//! `JOINER_FUZZ_REPLAY_MUTATIONS=N` sets the mutations per seed (default 500).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use joiner_fuzz_targets::{CappedAllocator, Target, TARGETS};

// A single allocation above the cap aborts the test binary, as it crashes the fuzz target.
#[global_allocator]
static ALLOCATOR: CappedAllocator = CappedAllocator;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn names_in(dir: &Path, strip: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").file_name())
        .map(|n| n.to_string_lossy().trim_end_matches(strip).to_string())
        .collect()
}

/// Input files of one seed directory, sorted so that a failure names the same seed each run.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("seeds").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_name().unwrap().to_string_lossy().to_string(), bytes)
        })
        .collect()
}

/// xorshift64*: deterministic, so a failing mutation is reproduced by rerunning the test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// libFuzzer's cheapest mutations, without its coverage feedback: flip a bit, set a byte to
/// an interesting value, insert or delete a run, splice in another seed's bytes, truncate.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: [u8; 10] = [0, 1, 0x7f, 0x80, 0xff, b'"', b'{', b'[', b'0', b'-'];
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(6) {
            0 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = at.min(out.len() - 1);
                out[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let run = vec![INTERESTING[rng.below(INTERESTING.len())]; 1 + rng.below(8)];
                out.splice(at..at, run);
            }
            3 if !out.is_empty() => {
                let end = (at + 1 + rng.below(8)).min(out.len());
                out.drain(at.min(end)..end);
            }
            4 if !other.is_empty() => {
                let from = rng.below(other.len());
                let end = (from + 1 + rng.below(64)).min(other.len());
                out.splice(at..at, other[from..end].iter().copied());
            }
            _ => out.truncate(at),
        }
    }
    out
}

/// Runs one input; a panic is re-raised naming the target and the input's bytes. An abort
/// (the allocation cap) cannot be caught: `JOINER_FUZZ_REPLAY_VERBOSE=1` names every input
/// before it runs.
fn check(target: &str, run: Target, label: &str, input: &[u8]) {
    if std::env::var_os("JOINER_FUZZ_REPLAY_VERBOSE").is_some() {
        eprintln!("{target}: {label}: {}", input.escape_ascii());
    }
    if let Err(panic) = std::panic::catch_unwind(|| run(input)) {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        panic!(
            "{target}: {label} panicked: {why}\ninput: b\"{}\"",
            input.escape_ascii()
        );
    }
}

#[test]
fn every_target_has_seeds_and_a_fuzz_binary() {
    let listed: BTreeSet<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(names_in(&fuzz_dir().join("seeds"), ""), listed);
    assert_eq!(names_in(&fuzz_dir().join("fuzz_targets"), ".rs"), listed);
}

#[test]
fn every_seed_and_its_mutations_run_clean() {
    let per_seed: usize = std::env::var("JOINER_FUZZ_REPLAY_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    joiner_fuzz_targets::tfplugin::init();
    let mut total = 0;
    for (target, run) in TARGETS {
        let seeds = seeds(target);
        assert!(!seeds.is_empty(), "fuzz/seeds/{target} is empty");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ target.len() as u64);
        let mut executions = 0;
        for (i, (name, bytes)) in seeds.iter().enumerate() {
            check(target, *run, &format!("seed {name}"), bytes);
            let other = &seeds[(i + 1) % seeds.len()].1;
            for m in 0..per_seed {
                let input = mutate(&mut rng, bytes, other);
                check(
                    target,
                    *run,
                    &format!("mutation {m} of seed {name}"),
                    &input,
                );
            }
            executions += 1 + per_seed;
        }
        println!(
            "{target}: {} seeds, {executions} executions clean",
            seeds.len()
        );
        total += executions;
    }
    println!("all targets: {total} executions clean");
}
