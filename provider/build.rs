//! Generates the gRPC server (and a test client) for Terraform's plugin protocol v6 and the
//! go-plugin services from `proto/`. protoc comes from `protoc-bin-vendored`, so a fresh
//! machine needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing else reads the environment yet.
        unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    }
    let protos = [
        "../proto/tfplugin6.proto",
        "../proto/goplugin.proto",
        "../proto/health.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_protos(&protos, &["../proto"])?;
    Ok(())
}
