//! Generates the Rust side of the control-plane contract in both protocol
//! versions the runner speaks (see `proto-build`), each into its own folder
//! of `OUT_DIR` (they share one protobuf package):
//! - 0.2, the default: `proto/companyhelm/runner/v1/runner.proto`, into `v0.2/`;
//! - 0.7, thread-only: `proto/v0.7/companyhelm/runner/v1/runner.proto`, into `v0.7/`.
//!
//! Both import this project's extension messages
//! (`proto/companyhelm/runner/v1/approvals.proto`), and both get serde impls
//! in the canonical protobuf JSON mapping (camelCase names, enums by name,
//! oneof members as plain fields), which the mock control plane's stdio and
//! scenario formats speak.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../../proto/companyhelm/runner/v1/approvals.proto");
    // The two envelopes carry their payload in a oneof of messages;
    // src/envelope.rs validates them by delegating to the payload's
    // generated impl.
    proto_build::compile(&proto_build::Job {
        protos: &["../../proto/companyhelm/runner/v1/runner.proto"],
        include: &["../../proto"],
        out_subdir: "v0.2",
        json_packages: &[".companyhelm.runner.v1"],
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
    })?;
    proto_build::compile(&proto_build::Job {
        protos: &["../../proto/v0.7/companyhelm/runner/v1/runner.proto"],
        include: &["../../proto/v0.7", "../../proto"],
        out_subdir: "v0.7",
        json_packages: &[".companyhelm.runner.v1"],
        hand_validated: &[
            (
                ".companyhelm.runner.v1.ClientMessage",
                "crate::runner_v07::ClientMessage",
            ),
            (
                ".companyhelm.runner.v1.ServerMessage",
                "crate::runner_v07::ServerMessage",
            ),
        ],
    })
}
