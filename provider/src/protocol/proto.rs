//! Rust types generated from `proto/` at build time (see `build.rs`).

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod tfplugin6 {
    tonic::include_proto!("tfplugin6");
}

pub mod plugin {
    tonic::include_proto!("plugin");
}

pub mod health {
    tonic::include_proto!("grpc.health.v1");
}
