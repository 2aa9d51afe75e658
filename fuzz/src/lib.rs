//! The libFuzzer side of joiner's fuzz targets: their bodies live in `joiner-fuzz-targets`
//! (tests/fuzz-targets), which the main workspace's tests also replay from `fuzz/seeds/`;
//! here each binary gets the allocation cap as its global allocator.

pub use joiner_fuzz_targets::*;

#[global_allocator]
static ALLOCATOR: CappedAllocator = CappedAllocator;
