//! Arbitrary requests to the objects API (method, route, name, query, body) against an in-memory
//! store, several on one store: never panics and never answers 5xx; a refused write changes
//! nothing (the store's revision stays), an accepted one moves it.
#![no_main]

use kudurru_control::objects::open_store;
use kudurru_control::objects::routes::{Outcome, Target, handle};
use kudurru_storage::Actor;
use libfuzzer_sys::fuzz_target;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

fuzz_target!(|requests: Vec<(u8, u8, &str, &str, &[u8])>| {
    let store = open_store(std::path::Path::new("/nonexistent"), true).expect("memory store");
    let actor = Actor::principal("token:fuzz").expect("a valid principal");
    for (method, route, name, query, body) in requests.into_iter().take(16) {
        let method = METHODS[usize::from(method) % METHODS.len()];
        // Real routes most of the time, so the handlers are reached; arbitrary paths too.
        let path = match route % 5 {
            0 => "/api/v1/clientgroups".to_owned(),
            1 => format!("/api/v1/clientgroups/{name}"),
            2 => format!("/api/v1/clientgroups/{name}/status"),
            3 => "/api/v1/audit".to_owned(),
            _ => name.to_owned(),
        };
        let Some(target) = Target::parse(&path) else {
            continue;
        };
        if target.permission(method).is_none() {
            continue;
        }
        let before = store.revision().expect("memory revision");
        match handle(store.as_ref(), &actor, method, &target, query, Some(body)) {
            Ok(Outcome::Json(status, _)) => {
                assert!((200..300).contains(&status), "{status}");
                let after = store.revision().expect("memory revision");
                if method == "GET" {
                    assert_eq!(before, after, "a read changed the store");
                }
            }
            Ok(Outcome::Watch(_)) => assert_eq!(method, "GET"),
            Err(error) => {
                assert!((400..500).contains(&error.status), "{error}");
                let after = store.revision().expect("memory revision");
                assert_eq!(
                    before, after,
                    "a refused {method} changed the store: {error}"
                );
            }
        }
    }
});
