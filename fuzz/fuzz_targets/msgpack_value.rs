//! libFuzzer driver for `joiner_fuzz_targets::msgpack_value` (tests/fuzz-targets), whose doc says what
//! it feeds and checks; `cargo test` replays the same body over `fuzz/seeds/msgpack_value`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| joiner_fuzz::msgpack_value::run(data));
