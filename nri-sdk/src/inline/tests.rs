//! Which messages the inline path takes, and the replies it builds.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use graft_proto::nri_ttrpc::RuntimeClient;
use ttrpc::r#async::{transport::Socket, Client};

use super::*;
use crate::event_mask::EventMask;
use crate::Event;

struct Plugin;

#[async_trait]
impl NriPlugin for Plugin {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }
}

fn intercept() -> Inline<Plugin> {
    let (ours, _theirs) = tokio::net::UnixStream::pair().unwrap();
    let client = RuntimeClient::new(Client::new(Socket::new(ours)));
    let (synced, _) = tokio::sync::watch::channel(false);
    let d = Dispatcher::new(Arc::new(Plugin), Duration::from_secs(1), client, synced);
    Inline::new(Arc::new(d), true, true)
}

pub(super) fn request(method: &str, payload: Vec<u8>) -> Request {
    Request {
        service: PLUGIN_SERVICE.into(),
        method: method.into(),
        payload,
        ..Default::default()
    }
}

pub(super) fn wire(req: &Request, stream_id: u32, kind: u8, flags: u8) -> Vec<u8> {
    let body = req.write_to_bytes().unwrap();
    let mut m = (body.len() as u32).to_be_bytes().to_vec();
    m.extend(stream_id.to_be_bytes());
    m.extend([kind, flags]);
    m.extend(body);
    m
}

fn create_payload() -> Vec<u8> {
    nri::CreateContainerRequest {
        container: Some(nri::Container {
            name: "app".into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
    .write_to_bytes()
    .unwrap()
}

/// Stream id and decoded Response of a reply message.
pub(super) fn decode(reply: &[u8]) -> (u32, Response) {
    assert_eq!(reply[8], MESSAGE_TYPE_RESPONSE);
    assert_eq!(reply[9], 0);
    let len = u32::from_be_bytes([reply[0], reply[1], reply[2], reply[3]]) as usize;
    assert_eq!(len, reply.len() - MESSAGE_HEADER_LENGTH);
    let stream = u32::from_be_bytes([reply[4], reply[5], reply[6], reply[7]]);
    (stream, Response::parse_from_bytes(&reply[10..]).unwrap())
}

#[tokio::test]
async fn only_well_formed_create_container_requests_are_taken() {
    let i = intercept();
    let good = request("CreateContainer", create_payload());
    let taken = i.intercept(&wire(&good, 3, MESSAGE_TYPE_REQUEST, 0));
    let (stream, response) = decode(&taken.expect("CreateContainer is taken").await);
    assert_eq!(stream, 3);
    // Not configured yet, so not subscribed: refused exactly as the ttrpc path refuses it.
    assert_eq!(response.status.code(), Code::UNIMPLEMENTED);

    let left = [
        (
            "another method",
            wire(&request("Configure", vec![]), 3, 1, 0),
        ),
        ("an even stream id", wire(&good, 4, MESSAGE_TYPE_REQUEST, 0)),
        ("a flagged request", wire(&good, 3, MESSAGE_TYPE_REQUEST, 2)),
        ("a response", wire(&good, 3, MESSAGE_TYPE_RESPONSE, 0)),
        (
            "another service",
            wire(
                &Request {
                    service: "nri.pkg.api.v1alpha1.Runtime".into(),
                    ..good.clone()
                },
                3,
                1,
                0,
            ),
        ),
        (
            "a payload that is not a CreateContainerRequest",
            wire(&request("CreateContainer", vec![0xff; 7]), 3, 1, 0),
        ),
        ("a body that is not a Request", {
            let mut m = wire(&good, 3, 1, 0);
            m.truncate(12);
            m[..4].copy_from_slice(&2u32.to_be_bytes());
            m
        }),
        ("a header alone, cut short", vec![0, 0, 0]),
    ];
    for (what, m) in left {
        assert!(i.intercept(&m).is_none(), "{what} is left to ttrpc");
    }
}

#[test]
fn replies_are_built_as_ttrpc_builds_them() {
    let answer = nri::CreateContainerResponse {
        adjust: Some(nri::ContainerAdjustment {
            env: vec![nri::KeyValue {
                key: "K".into(),
                value: "V".into(),
                ..Default::default()
            }],
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let (stream, ok) = decode(&reply(5, Ok(answer.clone())));
    assert_eq!(stream, 5);
    assert_eq!(ok.status.code(), Code::OK);
    assert_eq!(
        nri::CreateContainerResponse::parse_from_bytes(&ok.payload).unwrap(),
        answer
    );
    let refused = get_status(Code::INTERNAL, "refused: no record");
    let (_, err) = decode(&reply::<nri::CreateContainerResponse>(
        7,
        Err(TtrpcError::RpcStatus(refused.clone())),
    ));
    assert_eq!(*err.status, refused);
    assert!(err.payload.is_empty());
    let (_, other) = decode(&reply::<nri::CreateContainerResponse>(
        9,
        Err(TtrpcError::Others("boom".into())),
    ));
    assert_eq!(other.status.code(), Code::UNKNOWN);
    assert!(other.status.message().contains("boom"));
}

#[test]
fn the_last_resort_reply_fails_the_container() {
    let r = Response::parse_from_bytes(UNKNOWN_STATUS).unwrap();
    assert_eq!(r.status.code(), Code::UNKNOWN);
}
