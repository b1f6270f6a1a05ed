//! Numbers a control plane built on the later protocol reads byte for byte:
//! a mistake here is silent on our side and wrong on theirs.

use agent_runner_proto::runner::{AgentSdk, AgentSdkStatus};
use prost::Message;

#[test]
fn agent_sdk_status_uses_the_later_protocols_numbers() {
    assert_eq!(AgentSdkStatus::Unspecified as i32, 0);
    assert_eq!(AgentSdkStatus::Unconfigured as i32, 1);
    assert_eq!(AgentSdkStatus::Ready as i32, 2);
    assert_eq!(AgentSdkStatus::Error as i32, 3);
    // On the wire: field 3 (status), varint 2 for READY.
    let sdk = AgentSdk {
        name: "s".into(),
        models: vec![],
        status: AgentSdkStatus::Ready as i32,
        error_message: None,
    };
    let bytes = sdk.encode_to_vec();
    assert!(bytes.windows(2).any(|w| w == [3 << 3, 2]), "{bytes:?}");
}
