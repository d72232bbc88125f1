//! Arbitrary client bytes through kudurru's sans-IO HTTP/3 request and unidirectional streams
//! (`kudurru_core::http3`), in reads of arbitrary sizes, and arbitrary field sections through
//! its static-table QPACK decoder: never panics; a request stream hands out at most one
//! request, whose body is within the limit, and reads nothing after it or after an error;
//! what the decoder accepts re-encodes as a response (names lowercased) and decodes back to
//! the same fields.
#![no_main]

use kudurru_core::http3::{RequestStream, UniStream, qpack};
use libfuzzer_sys::fuzz_target;

const MAX_HEAD: usize = 2048;
const MAX_BODY: usize = 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&control, data)) = data.split_first() else {
        return;
    };
    let step = usize::from(control % 13) + 1;
    let fin_early = control & 0x80 != 0;

    let mut stream = RequestStream::new(MAX_HEAD, MAX_BODY);
    let mut delivered = false;
    let mut failed = false;
    let chunks: Vec<&[u8]> = data.chunks(step).collect();
    for (n, chunk) in chunks.iter().enumerate() {
        let fin = n + 1 == chunks.len() || (fin_early && n == chunks.len() / 2);
        match stream.receive(chunk, fin) {
            Ok(Some(request)) => {
                assert!(!failed, "a request after an error");
                assert!(!delivered, "two requests on one stream");
                delivered = true;
                if let Ok(body) = &request.body {
                    assert!(body.len() <= MAX_BODY);
                }
            }
            Ok(None) => {}
            Err(e) => {
                assert!(!e.reason.is_empty());
                failed = true;
            }
        }
        if delivered {
            // The caller stops reading here; neither more bytes nor a late expiry may hand
            // out a second request.
            assert!(matches!(stream.receive(chunk, true), Ok(None)));
            assert!(stream.expire().is_none(), "a second request on expiry");
            break;
        }
        if failed || fin {
            break;
        }
    }
    if !delivered && !failed {
        let _ = stream.expire();
    }

    let mut uni = UniStream::new();
    for chunk in data.chunks(step) {
        if uni.receive(chunk, false).is_err() {
            break;
        }
    }

    let mut fields = Vec::new();
    if qpack::decode(data, |name, value| {
        fields.push((name.to_vec(), value.to_vec()))
    })
    .is_ok()
    {
        let lowered: Vec<(Vec<u8>, Vec<u8>)> = fields
            .iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
            .collect();
        let borrowed: Vec<(&[u8], &[u8])> = lowered
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .collect();
        let status = 100 + u16::from(control) * 3;
        let mut encoded = Vec::new();
        qpack::encode_response(status, &borrowed, &mut encoded);
        let mut again = Vec::new();
        qpack::decode(&encoded, |name, value| {
            again.push((name.to_vec(), value.to_vec()))
        })
        .expect("kudurru's own encoding decodes");
        assert_eq!(
            again[0],
            (b":status".to_vec(), status.to_string().into_bytes())
        );
        assert_eq!(&again[1..], &lowered[..]);
    }
});
