//! Requests answered where their frames are read, without crossing ttrpc's tasks.
//!
//! Through ttrpc a request crosses four tasks before its answer reaches the socket (ttrpc's
//! connection reader, a task per request, ttrpc's writer, the trunk's writer), and each
//! crossing may wake another thread. CreateContainer is the call on every container's start
//! path, so the SDK decodes it on the trunk's reader task, runs the same handler as the ttrpc
//! path ([`Dispatcher::create`]: subscription, deadline, panic guard) and hands the encoded
//! reply to the trunk's writer: one crossing. A handler that cannot answer at once finishes
//! on a task of its own. Synchronize, for a plugin that returns no updates, is answered
//! here before it is decoded ([`Dispatcher::synchronize_first`]): only its `more` flag is
//! read. Every other request, and any message this does not recognise as a well-formed
//! request of those two, goes to ttrpc, which answers it as before (its errors for malformed
//! requests included).
//!
//! The reply is built as ttrpc's generated handler builds it: status OK with the encoded
//! response, or the handler's status, or UNKNOWN for any other error; a request's
//! `timeout_nano` bounds the handler as ttrpc's server does.

use std::sync::Arc;
use std::time::Duration;

use graft_proto::nri;
use protobuf::{CodedInputStream, Message};
use ttrpc::proto::{
    Request, Response, MESSAGE_HEADER_LENGTH, MESSAGE_LENGTH_MAX, MESSAGE_TYPE_REQUEST,
    MESSAGE_TYPE_RESPONSE,
};
use ttrpc::{get_status, Code, Error as TtrpcError};

use crate::dispatcher::Dispatcher;
use crate::mux::{Answer, Intercept};
use crate::plugin::NriPlugin;

/// The NRI Plugin service's name on the wire.
pub(crate) const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// The intercept that answers CreateContainer and Synchronize for one connection's
/// dispatcher, each where enabled.
pub(crate) struct Inline<P> {
    dispatcher: Arc<Dispatcher<P>>,
    create: bool,
    synchronize: bool,
}

impl<P: NriPlugin> Inline<P> {
    /// `synchronize` is honoured only for a plugin that returns no Synchronize updates.
    pub(crate) fn new(dispatcher: Arc<Dispatcher<P>>, create: bool, synchronize: bool) -> Self {
        let synchronize = synchronize && dispatcher.answers_synchronize_first();
        Inline {
            dispatcher,
            create,
            synchronize,
        }
    }

    /// Whether any request is answered here at all.
    pub(crate) fn takes_any(&self) -> bool {
        self.create || self.synchronize
    }

    fn create(&self, stream_id: u32, req: Request) -> Option<Answer> {
        let create = nri::CreateContainerRequest::parse_from_bytes(&req.payload).ok()?;
        let limit = (req.timeout_nano > 0).then(|| Duration::from_nanos(req.timeout_nano as u64));
        let dispatcher = self.dispatcher.clone();
        Some(Box::pin(async move {
            let handled = dispatcher.create(create);
            let result = match limit {
                None => handled.await,
                Some(limit) => tokio::time::timeout(limit, handled)
                    .await
                    .unwrap_or_else(|_| {
                        Err(TtrpcError::RpcStatus(get_status(
                            Code::DEADLINE_EXCEEDED,
                            "timeout",
                        )))
                    }),
            };
            reply(stream_id, result)
        }))
    }

    fn synchronize(&self, stream_id: u32, req: Request) -> Option<Answer> {
        let more = more_flag(&req.payload)?;
        let answer = self.dispatcher.synchronize_first(req.payload, more);
        Some(Box::pin(std::future::ready(reply(stream_id, Ok(answer)))))
    }
}

impl<P: NriPlugin> Intercept for Inline<P> {
    fn intercept(&self, message: &[u8]) -> Option<Answer> {
        let (stream_id, kind, flags) = header(message)?;
        // Anything ttrpc treats specially (even stream ids, flags, other types) stays there.
        if kind != MESSAGE_TYPE_REQUEST || flags != 0 || stream_id % 2 != 1 {
            return None;
        }
        let req = Request::parse_from_bytes(&message[MESSAGE_HEADER_LENGTH..]).ok()?;
        if req.service != PLUGIN_SERVICE {
            return None;
        }
        match req.method.as_str() {
            "CreateContainer" if self.create => self.create(stream_id, req),
            "Synchronize" if self.synchronize => self.synchronize(stream_id, req),
            _ => None,
        }
    }
}

/// A SynchronizeRequest's `more` (field 3) read from its encoding without decoding the
/// pods and containers: each top-level field is stepped over. `None` when the top level is
/// not well-formed, so that ttrpc decodes it and refuses it as before.
pub(crate) fn more_flag(payload: &[u8]) -> Option<bool> {
    const MORE: u32 = 3;
    let mut input = CodedInputStream::from_bytes(payload);
    let mut more = false;
    while let Some(tag) = input.read_raw_tag_or_eof().ok()? {
        let wire_type = protobuf::rt::WireType::new(tag & 7)?;
        if tag >> 3 == MORE && wire_type == protobuf::rt::WireType::Varint {
            // A repeated scalar field's last value wins, as the decoder takes it.
            more = input.read_bool().ok()?;
        } else {
            input.skip_field(wire_type).ok()?;
        }
    }
    Some(more)
}

/// Stream id, type and flags of a whole message.
fn header(message: &[u8]) -> Option<(u32, u8, u8)> {
    if message.len() < MESSAGE_HEADER_LENGTH {
        return None;
    }
    let stream_id = u32::from_be_bytes([message[4], message[5], message[6], message[7]]);
    Some((stream_id, message[8], message[9]))
}

/// The whole RESPONSE message for `result` on `stream_id`.
fn reply<M: Message>(stream_id: u32, result: ttrpc::Result<M>) -> Vec<u8> {
    let status = |code, msg: String| Response {
        status: Some(get_status(code, msg)).into(),
        ..Default::default()
    };
    let response = match result {
        Ok(answer) => match answer.write_to_bytes() {
            Ok(payload) => Response {
                status: Some(get_status(Code::OK, "")).into(),
                payload,
                ..Default::default()
            },
            Err(e) => status(Code::UNKNOWN, format!("Encoding response {e}")),
        },
        Err(TtrpcError::RpcStatus(s)) => Response {
            status: Some(s).into(),
            ..Default::default()
        },
        Err(other) => status(Code::UNKNOWN, format!("{other:?}")),
    };
    let payload = match response.write_to_bytes() {
        Ok(p) if p.len() <= MESSAGE_LENGTH_MAX => p,
        Ok(p) => encoded(&status(
            Code::INVALID_ARGUMENT,
            format!(
                "response payload {} bytes exceeds the {MESSAGE_LENGTH_MAX}-byte limit",
                p.len()
            ),
        )),
        Err(e) => encoded(&status(
            Code::UNKNOWN,
            format!("Encode Response failed. {e}"),
        )),
    };
    let mut message = Vec::with_capacity(MESSAGE_HEADER_LENGTH + payload.len());
    message.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    message.extend_from_slice(&stream_id.to_be_bytes());
    message.push(MESSAGE_TYPE_RESPONSE);
    message.push(0);
    message.extend_from_slice(&payload);
    message
}

/// `Response { status: { code: UNKNOWN } }`, encoded by hand: the reply when even a status
/// will not encode (rust-protobuf refuses only messages over 2 GiB), so that the runtime
/// fails the container rather than reading an empty reply as success with no adjustment.
const UNKNOWN_STATUS: &[u8] = &[0x0a, 0x02, 0x08, Code::UNKNOWN as u8];

fn encoded(response: &Response) -> Vec<u8> {
    response
        .write_to_bytes()
        .unwrap_or_else(|_| UNKNOWN_STATUS.to_vec())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod sync_tests;
