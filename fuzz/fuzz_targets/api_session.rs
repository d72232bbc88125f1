//! The dashboard's request input: arbitrary `Cookie` headers, a sign-in body, a CSRF header and
//! an Origin/Host pair, a rollback body and a token-creation body, a lookup's query string. Never panics; a session id
//! is taken only as 64 hex digits that the header holds; a sign-in token only from a JSON
//! object whose one field is `token`; a forged CSRF header or a foreign origin is refused.
#![no_main]

use std::time::{Duration, Instant};

use kudurru_control::api::{parse_lookup, parse_rollback, parse_token_request};
use kudurru_control::dashboard::session::{Sessions, check_csrf, parse_sign_in, session_cookie};
use kudurru_control::tokens::{Entry, Role};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, &str, &[u8], &str, &str, &str, &[u8])| {
    let (cookie_a, cookie_b, sign_in, csrf, origin, host, body) = input;
    if let Some(id) = session_cookie([cookie_a, cookie_b]) {
        assert_eq!(id.len(), 64);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(cookie_a.contains(id) || cookie_b.contains(id));
    }
    if let Ok(token) = parse_sign_in(sign_in) {
        let value: serde_json::Value = serde_json::from_slice(sign_in).expect("accepted JSON");
        let map = value.as_object().expect("an object");
        assert!(map.len() == 1 && map["token"].as_str().map(str::trim) == Some(token.as_str()));
    }
    // The lookup's query string (`name=&type=`): a name that parses, or a 400 naming the key.
    match parse_lookup(csrf) {
        Ok(_) => assert!(csrf.contains("name=")),
        Err(reply) => assert_eq!(reply.status, 400),
    }
    let sessions = Sessions::new(4);
    let entry = Entry {
        id: "0000abcd".into(),
        sha256: "00".repeat(32),
        role: Role::Operator,
        created: 0,
        expires: u64::MAX,
        name: String::new(),
    };
    let (cookie, session) = sessions.create(&entry, Duration::from_secs(60), Instant::now(), 0);
    assert!(sessions.get(&cookie, Instant::now()).is_some());
    // The CSRF token is 32 random bytes: an input cannot hold it.
    assert!(check_csrf(&session, Some(csrf), Some(origin), Some(host), false).is_err());
    assert!(check_csrf(&session, Some(csrf), None, Some(host), true).is_err());
    if check_csrf(
        &session,
        Some(&session.csrf),
        Some(origin),
        Some(host),
        false,
    )
    .is_ok()
    {
        assert!(origin.eq_ignore_ascii_case(&format!("http://{}", host.trim())));
    }
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(body) {
        if let Ok(version) = parse_rollback(&map) {
            assert!(version > 0 && map.len() == 1);
        }
        if let Ok((name, _, ttl)) = parse_token_request(&map) {
            assert!(!name.is_empty() && name.chars().count() <= 64);
            assert!(ttl.is_none_or(|t| !t.is_zero()));
        }
    }
});
