//! The bodies of joiner's fuzz targets, one module per target, so that two drivers run the
//! same code: cargo-fuzz's libFuzzer binaries (`fuzz/`, coverage-guided, by hand through
//! `scripts/fuzz`) and this crate's replay test (`tests/replay.rs`), which runs every
//! committed seed and a few thousand cheap mutations of them in `cargo test`. The
//! instrumented build takes over an hour cold on 2 cores; the replay costs seconds, so CI
//! keeps every seed, and every crash ever found, passing.
//!
//! Also here: an allocation cap each driver installs as its global allocator.
//!
//! libFuzzer's `-malloc_limit_mb` only sees allocations through a sanitizer's malloc hooks,
//! and `scripts/fuzz` builds without a sanitizer (it must work on stable Rust). Without a cap
//! a decoder that trusted a length prefix claiming 4 GB would reserve 4 GB of address space
//! and pass unnoticed (Linux overcommits: the RSS limit never sees untouched pages). The cap
//! makes any single allocation above [`MAX_ALLOCATION`] abort, which libFuzzer reports as a
//! crash with the input that caused it.

use std::alloc::{GlobalAlloc, Layout, System};

pub mod agent_parsers;
pub mod crd_validate;
pub mod interruption_message;
pub mod json_value;
pub mod kube_connect;
pub mod kube_sim_patch;
pub mod msgpack_value;
pub mod tfplugin;

/// A target's body: one input, which it may refuse but must never panic or over-allocate on.
pub type Target = fn(&[u8]);

/// Every target by the name of its binary in `fuzz/fuzz_targets/` and of its seed directory
/// in `fuzz/seeds/`.
pub const TARGETS: &[(&str, Target)] = &[
    ("agent_parsers", agent_parsers::run),
    ("crd_validate", crd_validate::run),
    ("interruption_message", interruption_message::run),
    ("json_value", json_value::run),
    ("kube_connect", kube_connect::run),
    ("kube_sim_patch", kube_sim_patch::run),
    ("msgpack_value", msgpack_value::run),
    ("tfplugin", tfplugin::run),
];

/// No input of at most `-max_len` bytes (64 KiB in `scripts/fuzz`) justifies more than this
/// in one allocation; the decoders check lengths against the bytes actually present.
pub const MAX_ALLOCATION: usize = 64 << 20;

pub struct CappedAllocator;

#[cold]
fn too_big(size: usize) -> ! {
    // No allocation here: format the size into a stack buffer and write it raw.
    let mut buf = [0u8; 96];
    let msg = b"joiner-fuzz: a single allocation exceeded the cap: ";
    buf[..msg.len()].copy_from_slice(msg);
    let mut n = msg.len();
    let mut digits = [0u8; 20];
    let mut d = 0;
    let mut s = size;
    loop {
        digits[d] = b'0' + (s % 10) as u8;
        d += 1;
        s /= 10;
        if s == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        buf[n] = digits[d];
        n += 1;
    }
    buf[n..n + 7].copy_from_slice(b" bytes\n");
    n += 7;
    use std::io::Write;
    let _ = std::io::stderr().write_all(&buf[..n]);
    std::process::abort();
}

// SAFETY: every call is forwarded to the system allocator unchanged; the cap only refuses.
unsafe impl GlobalAlloc for CappedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            too_big(layout.size());
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            too_big(layout.size());
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            too_big(new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

/// The first byte of `data` (a selector) and the rest.
pub fn split_first(data: &[u8]) -> Option<(u8, &[u8])> {
    data.split_first().map(|(b, rest)| (*b, rest))
}

/// Splits `data` at the first NUL into two parts (the second empty when there is none), so
/// that one input can carry e.g. a document and a patch, or a string and its context.
pub fn split_nul(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// The cty types the codec targets decode with, picked by the input's first byte: every
/// primitive, every collection kind, nesting, objects with optional attributes and dynamic
/// values (whose type comes from the input itself).
pub fn codec_type(selector: u8) -> joiner_provider::protocol::value::Type {
    use joiner_provider::protocol::value::Type;
    let tags = || {
        Type::object([
            ("name", Type::String),
            ("tags", Type::map(Type::String)),
            ("sizes", Type::list(Type::object([("x", Type::Number)]))),
        ])
    };
    match selector % 12 {
        0 => Type::Dynamic,
        1 => Type::String,
        2 => Type::Number,
        3 => Type::Bool,
        4 => Type::list(Type::String),
        5 => Type::set(Type::Number),
        6 => Type::map(Type::String),
        7 => Type::object([
            ("a", Type::String),
            ("b", Type::list(Type::Number)),
            ("c", Type::map(Type::Dynamic)),
            ("d", Type::Bool),
        ]),
        8 => Type::Tuple(vec![Type::String, Type::Number, Type::Bool]),
        9 => Type::list(tags()),
        10 => Type::map(Type::list(Type::set(Type::String))),
        _ => Type::object([("block", Type::set(tags())), ("any", Type::Dynamic)]),
    }
}

/// Whether `ty` mentions the dynamic pseudo-type anywhere.
pub fn has_dynamic(ty: &joiner_provider::protocol::value::Type) -> bool {
    use joiner_provider::protocol::value::Type;
    match ty {
        Type::Dynamic => true,
        Type::List(t) | Type::Set(t) | Type::Map(t) => has_dynamic(t),
        Type::Object(a) => a.values().any(has_dynamic),
        Type::Tuple(ts) => ts.iter().any(has_dynamic),
        _ => false,
    }
}
