use super::*;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// Header blocks from Go's HPACK encoder (golang.org/x/net/http2/hpack), the kubelet's,
// for a GetInfo call whose :authority is the socket path, and for the same path with
// every '/' turned into '-'.
const FROM_KUBELET: &str = "8386459c62ba2d98d558598c84d83498f52fb4b31909b06931ea63115392a94f41c063b8ec628346c75b632d054b15d16cc6a91158598c84d9e989ac1ca95e42f75999424146e8d6048d156686dc6b3c472459d2bd2be3046120a45ac2ccba0e4ebf5f8b1d75d0620d263d4c4d65647a8a9acac8b4c7602bba25c140027465864d833505b11f";
const DASHED: &str = "8386459c62ba2d98d558598c84d83498f52fb4b31909b06931ea63115392a94f41c05bb8ec5a8346b75b632d054ad5d16cc6a91158598c84d9e969ac1ca95e42f75999424146e8d6048d156686dc6b3c472459d2bd2be3046120a45ac2ccba0e4ebf5f8b1d75d0620d263d4c4d65647a8a9acac8b4c7602bba25c140027465864d833505b11f";
const LOCALHOST: &str = "8386459c62ba2d98d558598c84d83498f52fb4b31909b06931ea63115392a94f4186a0e41d139d095f8b1d75d0620d263d4c4d65647a8a9acac8b4c7602bba25c140027465864d833505b11f";

#[test]
fn huffman_path_authority_becomes_valid() {
    let mut block = unhex(FROM_KUBELET);
    fix_header_block(&mut block);
    assert_eq!(block, unhex(DASHED));
}

#[test]
fn valid_authority_is_untouched() {
    let mut block = unhex(LOCALHOST);
    fix_header_block(&mut block);
    assert_eq!(block, unhex(LOCALHOST));
}

#[test]
fn raw_literal_authority_is_fixed() {
    // Literal with incremental indexing, name index 1, raw value "/a/b".
    let mut block = vec![0x41, 0x04, b'/', b'a', b'/', b'b'];
    fix_header_block(&mut block);
    assert_eq!(block, [0x41, 0x04, b'-', b'a', b'-', b'b']);
}

/// `raw` through the adapter's frame processing, preface included.
fn process(frames: &[(u8, u8, &[u8])]) -> Vec<u8> {
    let mut fix = AuthorityFix::new(tokio::io::empty());
    fix.raw = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    for (kind, flags, payload) in frames {
        let len = payload.len();
        fix.raw.extend_from_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            *kind,
            *flags,
        ]);
        fix.raw.extend_from_slice(&[0, 0, 0, 1]);
        fix.raw.extend_from_slice(payload);
    }
    fix.process();
    assert!(fix.raw.is_empty());
    fix.ready[PREFACE_LEN..].to_vec()
}

/// Found by driver/tests/props.rs: a header block split over HEADERS and CONTINUATION
/// had each CONTINUATION read from its start, which may be inside another header's
/// value; bytes there that looked like an `:authority` literal were dashed, changing
/// that header. Here header `x` has the 6-byte value `A\x41\x02//B`, and the cut falls
/// after its first byte: `\x41\x02//` reads as `:authority: //`.
#[test]
fn a_continuation_that_starts_inside_a_value_is_left_alone() {
    let first: &[u8] = &[0x40, 0x01, b'x', 0x06, b'A'];
    let rest: &[u8] = &[0x41, 0x02, b'/', b'/', b'B'];
    let out = process(&[(HEADERS, 0, first), (CONTINUATION, FLAG_END_HEADERS, rest)]);
    assert_eq!(&out[9..14], first);
    assert_eq!(&out[23..], rest, "header x was rewritten");
}

/// A block cut on a field boundary still gets its `:authority` fixed in every fragment;
/// after END_HEADERS the next block starts afresh.
#[test]
fn a_continuation_on_a_field_boundary_is_fixed() {
    let first: &[u8] = &[0x82, 0x41, 0x02, b'/', b'a'];
    let rest: &[u8] = &[0x41, 0x02, b'/', b'b'];
    let out = process(&[
        (HEADERS, 0, first),
        (CONTINUATION, 0, &[0x86]),
        (CONTINUATION, FLAG_END_HEADERS, rest),
        (CONTINUATION, FLAG_END_HEADERS, rest),
    ]);
    assert_eq!(&out[9..14], &[0x82, 0x41, 0x02, b'-', b'a']);
    assert_eq!(&out[33..37], &[0x41, 0x02, b'-', b'b']);
    assert_eq!(
        &out[46..],
        rest,
        "a CONTINUATION outside a block is not read"
    );
}

#[tokio::test]
async fn frames_pass_through_with_the_fix() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let block = unhex(FROM_KUBELET);
    let mut stream = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    stream.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // empty SETTINGS
    let len = block.len();
    stream.extend_from_slice(&[
        (len >> 16) as u8,
        (len >> 8) as u8,
        len as u8,
        HEADERS,
        0x4,
        0,
        0,
        0,
        1,
    ]);
    stream.extend_from_slice(&block);
    let (mut client, server) = tokio::io::duplex(64);
    let writer = tokio::spawn(async move {
        for chunk in stream.chunks(7) {
            client.write_all(chunk).await.unwrap();
        }
    });
    let mut fixed = AuthorityFix::new(server);
    let mut out = Vec::new();
    let mut buf = [0u8; 100];
    while out.len() < PREFACE_LEN + 9 + 9 + len {
        let n = fixed.read(&mut buf).await.unwrap();
        out.extend_from_slice(&buf[..n]);
    }
    writer.await.unwrap();
    assert_eq!(&out[PREFACE_LEN + 18..], &unhex(DASHED)[..]);
}
