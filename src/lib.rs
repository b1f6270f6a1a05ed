//! Wire types for the two contracts the runner speaks.
//!
//! * [`runner`]: `companyhelm.runner.v1`, the control-plane link
//!   (registration, the bidirectional `ControlChannel`, GitHub tokens).
//! * [`code_agent`]: `a3s.code.agent.v1`, the coding-agent engine API
//!   (`CodeAgentService`), served by the local engine and by remote ones.
//!
//! Every message implements [`prost_protovalidate::Validate`] from its
//! `buf.validate` annotations; [`violations`] turns a failed check into the
//! field-naming text a `RequestError` carries.

#![allow(clippy::all, clippy::pedantic)]

mod generated {
    pub mod companyhelm {
        pub mod runner {
            pub mod v1 {
                tonic::include_proto!("companyhelm.runner.v1");
            }
        }
    }
    pub mod a3s {
        pub mod code {
            pub mod agent {
                pub mod v1 {
                    tonic::include_proto!("a3s.code.agent.v1");
                }
            }
        }
    }
    include!(concat!(env!("OUT_DIR"), "/validate_impl.rs"));
}

mod envelope;

pub use generated::a3s::code::agent::v1 as code_agent;
pub use generated::companyhelm::runner::v1 as runner;
pub use prost_protovalidate::{Validate, ValidationError};

/// One line naming every violated field, e.g.
/// `create_agent_request.agent_id: value length must be at least 1 characters`.
pub fn violations(err: &ValidationError) -> String {
    err.violations()
        .iter()
        .map(|v| format!("{}: {}", v.field_path(), v.message()))
        .collect::<Vec<_>>()
        .join("; ")
}
