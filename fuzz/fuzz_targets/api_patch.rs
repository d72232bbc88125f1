//! Arbitrary bytes as a settings PATCH body and as an Authorization header: never panics; a
//! patch the API accepts merges into a document that parses as a layer holding exactly keys
//! of the scope it was sent to, and a refusal is a 4xx with a stable code.
#![no_main]

use std::path::Path;

use kudurru_control::api::{bearer_token, parse_patch};
use kudurru_control::config::Scope;
use kudurru_control::layers::FileLayer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&[u8], &str)| {
    let (body, header) = input;
    if let Some(token) = bearer_token(header) {
        assert!(header.to_ascii_lowercase().contains("bearer"));
        assert_eq!(token, token.trim());
    }
    for scope in [Scope::Cluster, Scope::Node] {
        match parse_patch(body, scope) {
            Ok(document) => {
                let text = toml::to_string(&document).expect("a TOML table serializes");
                let layer = FileLayer::parse(Path::new("(api)"), &text)
                    .unwrap_or_else(|e| panic!("an accepted patch does not parse: {e}\n{text}"));
                assert!(layer.keys.iter().all(|k| k.scope == scope && !k.host_only));
            }
            Err(reply) => {
                assert!((400..500).contains(&reply.status), "{}", reply.status);
                assert!(reply.body["code"].is_string());
            }
        }
    }
});
