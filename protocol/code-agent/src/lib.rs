//! Wire types for `a3s.code.agent.v1`, the coding-agent engine API
//! (`CodeAgentService`), served by the local engine and by remote ones.
//!
//! A crate of its own so that the engine and its clients never link the
//! control-plane contract (`agent-runner-proto`). Every message implements
//! [`prost_protovalidate::Validate`] from its `buf.validate` annotations.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

mod generated {
    pub mod a3s {
        pub mod code {
            pub mod agent {
                pub mod v1 {
                    tonic::include_proto!("a3s.code.agent.v1");
                }
            }
        }
    }
    // The generated impls name types by their package path (`a3s::…`).
    include!(concat!(env!("OUT_DIR"), "/validate_impl.rs"));
}

pub use generated::a3s::code::agent::v1::*;
pub use prost_protovalidate::{Validate, ValidationError};
