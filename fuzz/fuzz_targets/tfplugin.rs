//! libFuzzer driver for `joiner_fuzz_targets::tfplugin` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/tfplugin`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: joiner_fuzz::tfplugin::init(),
    |data: &[u8]| joiner_fuzz::tfplugin::run(data)
);
