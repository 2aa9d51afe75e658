//! libFuzzer driver for `joiner_fuzz_targets::agent_parsers` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/agent_parsers`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| joiner_fuzz::agent_parsers::run(data));
