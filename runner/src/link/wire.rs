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
//! Every update is encoded once, by the outbox as it enters (masked);
//! those bytes (shared, not copied: the journal's record of a durable
//! update is the same bytes) are written here as they are, the number
//! after them. prost's encoder never runs on the way out.

use std::marker::PhantomData;

use bytes::BufMut;
use tonic::codec::{BufferSettings, Codec, EncodeBuf, Encoder, Streaming};
use tonic::{GrpcMethod, IntoStreamingRequest, Response, Status};
use tonic_prost::ProstDecoder;

use crate::delivery::outgoing::Outgoing;
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

/// `ClientMessage.sequence`'s field number (runner.proto).
const SEQUENCE_FIELD: u32 = 100;

/// Opens the ControlChannel over `service`, sending `updates` and
/// decoding what comes back as `M` (the `ServerMessage` of the protocol
/// version spoken: the path and the outbound bytes are the same in both).
pub async fn control_channel<M>(
    service: Service,
    updates: impl IntoStreamingRequest<Message = Outgoing>,
) -> Result<Response<Streaming<M>>, Status>
where
    M: prost::Message + Default + Send + 'static,
{
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
        SharedCodec(PhantomData),
    )
    .await
}

/// Encodes shared updates, decodes what the control plane sends (`M`).
#[derive(Debug)]
struct SharedCodec<M>(PhantomData<fn() -> M>);

impl<M> Codec for SharedCodec<M>
where
    M: prost::Message + Default + Send + 'static,
{
    type Encode = Outgoing;
    type Decode = M;
    type Encoder = SharedEncoder;
    type Decoder = ProstDecoder<M>;

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
        // The buffer grows as needed: writing into it cannot run short.
        write(&item, buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(ENCODE_BUFFER, YIELD_THRESHOLD)
    }
}

/// Encodes `item`: the shared update's bytes (unnumbered: the outbox
/// encodes updates without a number), then its number, if it has one. A
/// scalar field seen twice takes its last value (protobuf's rule, which
/// every decoder follows), so the number written after the update is the
/// one the control plane reads.
fn write(item: &Outgoing, buf: &mut impl BufMut) {
    buf.put_slice(&item.encoded);
    if item.sequence != 0 {
        prost::encoding::uint64::encode(SEQUENCE_FIELD, &item.sequence, buf);
    }
}

#[cfg(test)]
mod tests {
    use agent_runner_proto::runner::agent_runner_control_service_server::SERVICE_NAME;

    use agent_runner_proto::runner::ClientMessage;
    use bytes::Bytes;
    use prost::Message as _;

    use super::*;

    /// The number written after an update's bytes is the one decoded,
    /// and the bytes equal those of the numbered update encoded whole.
    #[test]
    fn a_number_written_after_the_update_is_the_one_decoded() {
        use agent_runner_proto::runner::TurnUpdate;
        use agent_runner_proto::runner::client_message::Payload;
        for number in [7, 0, 1 << 40] {
            let message = ClientMessage {
                request_id: Some("r".into()),
                payload: Some(Payload::TurnUpdate(TurnUpdate {
                    thread_id: "t".into(),
                    ..Default::default()
                })),
                sequence: 0,
            };
            let outgoing = Outgoing {
                label: crate::delivery::label::Label::of(&message),
                encoded: Bytes::from(message.encode_to_vec()),
                sequence: number,
            };
            let mut buf = bytes::BytesMut::new();
            write(&outgoing, &mut buf);
            let decoded = ClientMessage::decode(buf.freeze()).unwrap();
            assert_eq!(decoded.sequence, number);
            let whole = ClientMessage {
                sequence: number,
                ..message
            };
            assert_eq!(decoded, whole);
            assert_eq!(decoded.encode_to_vec(), whole.encode_to_vec());
            assert_eq!(outgoing.decode(), whole);
        }
    }

    #[test]
    fn names_the_generated_service_and_method() {
        assert_eq!(SERVICE, SERVICE_NAME);
        assert_eq!(PATH, format!("/{SERVICE_NAME}/ControlChannel"));
    }
}
