//! libFuzzer driver for `joiner_fuzz_targets::crd_validate` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/crd_validate`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| joiner_fuzz::crd_validate::run(data));
