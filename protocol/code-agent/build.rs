//! Generates the Rust side of the engine contract,
//! `proto/a3s/code/agent/v1/code_agent.proto` (see `proto-build`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    proto_build::compile(&proto_build::Job {
        protos: &["../../proto/a3s/code/agent/v1/code_agent.proto"],
        include: &["../../proto"],
        out_subdir: "",
        json_packages: &[],
        hand_validated: &[],
    })
}
