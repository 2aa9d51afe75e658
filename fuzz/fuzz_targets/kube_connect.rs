//! libFuzzer driver for `joiner_fuzz_targets::kube_connect` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/kube_connect`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| joiner_fuzz::kube_connect::run(data));
