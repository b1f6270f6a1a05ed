//! The ControlChannel call with updates shared, not copied.
//!
//! An update sent in acknowledged mode is kept until the control plane
//! acknowledges it, and the same update goes on the wire. The generated
//! client's codec takes each message by value, so every kept update was
//! deep-copied (strings, payload) once per send, a large part of an
//! outbox drain's cost. This call is the generated one with a codec
//! whose messages are [`Outgoing`]: the shared update and its sequence
//! number, encoded from the pointer with the number written after it (the
//! update itself is never changed to number it: its transcript line may
//! still hold it, and numbering it in place copied it). What it receives is
//! decoded as before.
//!
//! A journaled update (terminal and structural ones: most of what a busy
//! runner sends) was encoded twice, once by the outbox for the journal and
//! again here. It now carries the journal's bytes (shared, not copied),
//! which are written as they are, the number after them: prost's encoder
//! then only runs for the updates that are not journaled.

use std::sync::Arc;

use agent_runner_proto::runner::{ClientMessage, ServerMessage};
use bytes::{BufMut, Bytes};
use prost::Message as _;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder, Streaming};
use tonic::{GrpcMethod, IntoStreamingRequest, Response, Status};
use tonic_prost::ProstDecoder;

use crate::host::client::{MAX_DECODING_MESSAGE_SIZE, Service};

/// The service and the method's path, as the generated client names them
/// (a test checks them against the generated service).
const SERVICE: &str = "companyhelm.runner.v1.AgentRunnerControlService";
const PATH: &str = "/companyhelm.runner.v1.AgentRunnerControlService/ControlChannel";

/// What updates are encoded into (reserved once per call). Each chunk
/// handed to HTTP/2 is split off it; the next is written into the rest.
/// tonic's default (8 KiB, chunks of 32 KiB) grew it by doubling, copying,
/// for every chunk of a burst, and each grown buffer came and went with
/// its pages. About three chunks fit in this
/// one, and a 64 KiB block is one of the allocator's reused medium sizes.
const ENCODE_BUFFER: usize = 64 * 1024;

/// A chunk is handed to HTTP/2 once it holds at least this much (checked
/// after each whole update): HTTP/2's default frame size, so a chunk is
/// about one DATA frame.
const YIELD_THRESHOLD: usize = 16 * 1024;

/// An update on its way to the wire: shared with whatever else holds it
/// (the re-send store, a transcript line not yet written), and its
/// sequence number in acknowledged mode (0: none).
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// The update, never changed to number it.
    pub message: Arc<ClientMessage>,
    /// `message` encoded (unnumbered), as the journal holds it: written as
    /// it is rather than encoded again. `None`: encoded here.
    pub encoded: Option<Bytes>,
    /// What goes on the wire as its `sequence`.
    pub sequence: u64,
}

impl Outgoing {
    /// The update as the control plane decodes it (numbered); a copy only
    /// if it is shared and its own number differs.
    pub fn into_message(self) -> ClientMessage {
        let mut message = Arc::unwrap_or_clone(self.message);
        message.sequence = self.sequence;
        message
    }
}

/// `ClientMessage.sequence`'s field number (runner.proto).
const SEQUENCE_FIELD: u32 = 100;

/// Opens the ControlChannel over `service`, sending `updates`.
pub async fn control_channel(
    service: Service,
    updates: impl IntoStreamingRequest<Message = Outgoing>,
) -> Result<Response<Streaming<ServerMessage>>, Status> {
    let mut grpc =
        tonic::client::Grpc::new(service).max_decoding_message_size(MAX_DECODING_MESSAGE_SIZE);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    let mut request = updates.into_streaming_request();
    request
        .extensions_mut()
        .insert(GrpcMethod::new(SERVICE, "ControlChannel"));
    grpc.streaming(
        request,
        http::uri::PathAndQuery::from_static(PATH),
        SharedCodec,
    )
    .await
}

/// Encodes shared updates, decodes what the control plane sends.
#[derive(Debug, Clone, Copy, Default)]
struct SharedCodec;

impl Codec for SharedCodec {
    type Encode = Outgoing;
    type Decode = ServerMessage;
    type Encoder = SharedEncoder;
    type Decoder = ProstDecoder<ServerMessage>;

    fn encoder(&mut self) -> SharedEncoder {
        SharedEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct SharedEncoder;

impl Encoder for SharedEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(&mut self, item: Outgoing, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // The buffer grows as needed: encoding into it cannot run short
        // (tonic adds "Error encoding" to anything returned here).
        write(&item, buf).map_err(|e| Status::internal(e.to_string()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(ENCODE_BUFFER, YIELD_THRESHOLD)
    }
}

/// Encodes `item`: the shared update, then its number if the update does
/// not carry it. A scalar field seen twice takes its last value
/// (protobuf's rule, which every decoder follows), so the number written
/// after the update is the one the control plane reads.
fn write(item: &Outgoing, buf: &mut impl BufMut) -> Result<(), prost::EncodeError> {
    match &item.encoded {
        Some(encoded) => {
            debug_assert_eq!(
                encoded[..],
                item.message.encode_to_vec()[..],
                "stale encoding"
            );
            buf.put_slice(encoded);
        }
        None => item.message.encode(buf)?,
    }
    if item.sequence != item.message.sequence {
        prost::encoding::uint64::encode(SEQUENCE_FIELD, &item.sequence, buf);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::runner::agent_runner_control_service_server::SERVICE_NAME;

    use super::*;

    /// The number written after a shared update is the one decoded, and
    /// the bytes equal those of the numbered update encoded whole, whether
    /// the update is encoded here or its journal encoding is written.
    #[test]
    fn a_number_written_after_the_update_is_the_one_decoded() {
        use agent_runner_proto::runner::TurnUpdate;
        use agent_runner_proto::runner::client_message::Payload;
        for (own, number) in [(0, 7), (0, 0), (5, 9), (5, 0), (3, 3)] {
            let message = Arc::new(ClientMessage {
                request_id: Some("r".into()),
                payload: Some(Payload::TurnUpdate(TurnUpdate {
                    thread_id: "t".into(),
                    ..Default::default()
                })),
                sequence: own,
            });
            // Encoded here, or written from the journal's encoding.
            for encoded in [None, Some(Bytes::from(message.encode_to_vec()))] {
                let outgoing = Outgoing {
                    message: message.clone(),
                    encoded,
                    sequence: number,
                };
                let mut buf = bytes::BytesMut::new();
                write(&outgoing, &mut buf).unwrap();
                let decoded = ClientMessage::decode(buf.freeze()).unwrap();
                assert_eq!(decoded.sequence, number, "{own} -> {number}");
                let whole = outgoing.into_message();
                assert_eq!(decoded, whole);
                assert_eq!(decoded.encode_to_vec(), whole.encode_to_vec());
            }
        }
    }

    #[test]
    fn names_the_generated_service_and_method() {
        assert_eq!(SERVICE, SERVICE_NAME);
        assert_eq!(PATH, format!("/{SERVICE_NAME}/ControlChannel"));
    }
}
