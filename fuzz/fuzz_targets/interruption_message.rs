//! libFuzzer driver for `joiner_fuzz_targets::interruption_message` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/interruption_message`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| joiner_fuzz::interruption_message::run(data));
