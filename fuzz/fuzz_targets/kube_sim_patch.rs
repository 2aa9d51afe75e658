//! libFuzzer driver for `joiner_fuzz_targets::kube_sim_patch` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/kube_sim_patch`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| joiner_fuzz::kube_sim_patch::run(data));
