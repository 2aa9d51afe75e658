//! Terraform plugin protocol v6: handshake, DynamicValue codec, schema, gRPC server.
