//! Arbitrary bytes as a Frame Streams control frame's body from a dnstap collector (what the
//! dnstap sink reads after READY and after STOP): `ControlFrame::decode` never panics, and
//! what decodes holds no more content-type bytes than the body had, re-encoding the same
//! when it is one of the frames kudurru writes.
#![no_main]

use kudurru_control::querylog::dnstap::{Control, ControlFrame, control_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let Ok(frame) = ControlFrame::decode(body) else {
        return;
    };
    let carried: usize = frame.content_types.iter().map(|t| t.len() + 8).sum();
    assert_eq!(4 + carried, body.len(), "every byte is the type or a field");
    for kind in [
        Control::Accept,
        Control::Start,
        Control::Ready,
        Control::Finish,
    ] {
        if frame.kind == kind as u32 && frame.content_types.len() == 1 && frame.offers_dnstap() {
            assert_eq!(&control_frame(kind)[8..], body);
        }
    }
});
