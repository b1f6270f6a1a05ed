//! Generates the Rust side of the control-plane contract,
//! `proto/companyhelm/runner/v1/runner.proto` (see `proto-build`), plus serde
//! impls in the canonical protobuf JSON mapping (camelCase names, enums by
//! name, oneof members as plain fields), which the mock control plane's stdio
//! and scenario formats speak.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    proto_build::compile(&proto_build::Job {
        protos: &["../../proto/companyhelm/runner/v1/runner.proto"],
        include: "../../proto",
        json_packages: &[".companyhelm.runner.v1"],
        // The two envelopes carry their payload in a oneof of messages;
        // src/envelope.rs validates them by delegating to the payload's
        // generated impl.
        hand_validated: &[
            (
                ".companyhelm.runner.v1.ClientMessage",
                "crate::runner::ClientMessage",
            ),
            (
                ".companyhelm.runner.v1.ServerMessage",
                "crate::runner::ServerMessage",
            ),
        ],
    })
}
