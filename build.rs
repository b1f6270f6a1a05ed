//! Generates the Rust side of both wire contracts.
//!
//! * `proto/companyhelm/runner/v1/runner.proto`: the control-plane link.
//! * `proto/a3s/code/agent/v1/code_agent.proto`: the coding-agent engine API.
//!
//! Both get prost messages, tonic clients and servers, and compile-time
//! `buf.validate` checks (`prost-protovalidate-build`, no CEL on the hot
//! path). `buf/validate/validate.proto` is not copied into this repository:
//! it is resolved from the `prost-protovalidate-types` crate, which ships its
//! descriptor, and handed to protoc with `--descriptor_set_in`. protoc itself
//! is `build-support/protoc` (see `.cargo/config.toml`): a system protoc, or
//! the one `protoc-bin-vendored` ships, so a fresh machine needs nothing
//! installed.
//!
//! `companyhelm.runner.v1` also gets serde impls in the canonical protobuf
//! JSON mapping (`pbjson-build`: camelCase names, enums by name, oneof members
//! as plain fields), which the mock control plane's stdio and scenario formats
//! speak.

use std::path::PathBuf;

use prost::Message;

const PROTOS: &[&str] = &[
    "proto/companyhelm/runner/v1/runner.proto",
    "proto/a3s/code/agent/v1/code_agent.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    // buf/validate/validate.proto, as a descriptor from the crate that ships it.
    let validate_set = prost_types::FileDescriptorSet {
        file: prost_protovalidate_types::DESCRIPTOR_POOL
            .file_descriptor_protos()
            .cloned()
            .collect(),
    };
    let validate_set_path = out_dir.join("buf_validate_descriptor_set.bin");
    std::fs::write(&validate_set_path, validate_set.encode_to_vec())?;

    let descriptor_path = out_dir.join("file_descriptor_set.bin");
    let mut config = prost_build::Config::new();
    config
        .protoc_arg(format!(
            "--descriptor_set_in={}",
            validate_set_path.display()
        ))
        .file_descriptor_set_path(&descriptor_path);

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(config, PROTOS, &["proto"])?;

    // Canonical protobuf JSON for the control-plane messages only; written to
    // OUT_DIR/companyhelm.runner.v1.serde.rs and included by src/lib.rs.
    pbjson_build::Builder::new()
        .register_descriptors(&std::fs::read(&descriptor_path)?)?
        .build(&[".companyhelm.runner.v1"])?;

    prost_protovalidate_build::Builder::new()
        .file_descriptor_set_path(&descriptor_path)?
        // Imported schemas are someone else's types: no impls for them here.
        .extern_path(".buf.validate", "::prost_protovalidate::types")
        .extern_path(".google.protobuf", "::prost_types")
        // The two envelopes carry their payload in a oneof of messages, which
        // the generator does not cover; src/envelope.rs validates them by
        // delegating to the payload's generated impl. Anything else it cannot
        // cover fails the build instead of going unchecked.
        .extern_path(
            ".companyhelm.runner.v1.ClientMessage",
            "crate::runner::ClientMessage",
        )
        .extern_path(
            ".companyhelm.runner.v1.ServerMessage",
            "crate::runner::ServerMessage",
        )
        .fail_on_runtime_only(true)
        .compile()?;
    Ok(())
}
