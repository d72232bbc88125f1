//! The etcd driver's decoders (`kudurru_storage::fuzz_decode_value`): what etcd returns is peer
//! input, so arbitrary bytes under each kind of key — the head, an object, an audit record, a
//! body's metadata — answer an error or a value, never a panic. The first byte chooses the key.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((choice, value)) = data.split_first() else {
        return;
    };
    let key: &[u8] = match choice % 5 {
        0 => b"/kudurru/fuzz/meta/head",
        1 => b"/kudurru/fuzz/objects/Widget/a",
        2 => b"/kudurru/fuzz/audit/00000000000000000001",
        3 => b"/kudurru/fuzz/bodymeta/BlockList/ads/0",
        _ => b"/kudurru/fuzz/objects/Widget/\xff",
    };
    let _ = kudurru_storage::fuzz_decode_value(key, value);
});
