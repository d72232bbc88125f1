//! The list-body cache's rules, for every driver: `body_conformance!` runs them all for one.

use kudurru_storage::{
    AuditLog, AuditQuery, BodyCache, BodyMeta, MAX_BODY_KEY_BYTES, Store, StoreError, Timestamp,
};

use crate::harness::*;

/// Instantiates every body-cache rule for `$harness` in a module `$driver`.
#[macro_export]
macro_rules! body_conformance {
    ($driver:ident, $harness:ty) => {
        mod $driver {
            $crate::body_conformance!(@tests $harness;
                body_round_trips_with_its_metadata,
                body_of_missing_key_is_none,
                put_body_replaces_the_previous_body,
                empty_body_round_trips,
                large_body_round_trips,
                delete_bodies_removes_exactly_the_prefix,
                delete_bodies_with_empty_prefix_removes_all,
                body_keys_are_in_byte_order,
                body_key_empty_or_over_512_bytes_is_invalid_and_changes_nothing,
                body_meta_that_does_not_describe_the_body_is_invalid_and_changes_nothing,
                bodies_are_not_objects_no_revision_no_audit,
            );
        }
    };
    (@tests $harness:ty; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                $crate::bodies::$rule::<$harness>();
            }
        )*
    };
}

/// `body` with its metadata, fetched at `millis`.
pub(crate) fn meta(body: &[u8], etag: Option<&str>, millis: i64) -> BodyMeta {
    BodyMeta::for_body(
        body,
        etag.map(str::to_owned),
        Some("Tue, 14 Nov 2023 22:13:20 GMT".into()),
        Timestamp::from_unix_millis(millis),
    )
}

fn put<H: Harness>(h: &H, key: &str, body: &[u8]) {
    h.store()
        .put_body(key, body, &meta(body, None, 1_000))
        .unwrap();
}

fn keys<H: Harness>(h: &H) -> Vec<String> {
    h.store().body_keys().unwrap()
}

pub(crate) fn body_round_trips_with_its_metadata<H: Harness>() {
    let (h, _) = setup::<H>();
    let body = b"0.0.0.0 ads.example\n0.0.0.0 tracker.example\n";
    let written = meta(body, Some("\"abc\""), 1_700_000_000_250);
    h.store()
        .put_body("BlockList/ads/0", body, &written)
        .unwrap();
    let (read, read_meta) = h.store().get_body("BlockList/ads/0").unwrap().unwrap();
    assert_eq!(read, body);
    assert_eq!(read_meta, written);
    assert_eq!(read_meta.bytes, body.len() as u64);
}

pub(crate) fn body_of_missing_key_is_none<H: Harness>() {
    let (h, _) = setup::<H>();
    assert!(h.store().get_body("BlockList/ads/0").unwrap().is_none());
    put(&h, "BlockList/ads/0", b"x");
    assert!(h.store().get_body("BlockList/ads/1").unwrap().is_none());
}

pub(crate) fn put_body_replaces_the_previous_body<H: Harness>() {
    let (h, _) = setup::<H>();
    put(&h, "BlockList/ads/0", &[b'a'; 10_000]);
    let second = meta(b"short", Some("\"2\""), 2_000);
    h.store()
        .put_body("BlockList/ads/0", b"short", &second)
        .unwrap();
    assert_eq!(
        h.store().get_body("BlockList/ads/0").unwrap(),
        Some((b"short".to_vec(), second))
    );
    assert_eq!(keys(&h), ["BlockList/ads/0"]);
}

pub(crate) fn empty_body_round_trips<H: Harness>() {
    let (h, _) = setup::<H>();
    put(&h, "BlockList/empty/0", b"");
    let (body, meta) = h.store().get_body("BlockList/empty/0").unwrap().unwrap();
    assert!(body.is_empty());
    assert_eq!(meta.bytes, 0);
}

pub(crate) fn large_body_round_trips<H: Harness>() {
    let (h, _) = setup::<H>();
    // Several MiB spill over many redb pages; a byte pattern that is not periodic in a page.
    let body: Vec<u8> = (0..6u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    put(&h, "BlockList/big/0", &body);
    put(&h, "BlockList/big/1", b"neighbour");
    let (read, meta) = h.store().get_body("BlockList/big/0").unwrap().unwrap();
    assert_eq!(meta.bytes, body.len() as u64);
    assert!(read == body, "the large body reads back byte for byte");
    assert_eq!(
        h.store().get_body("BlockList/big/1").unwrap().unwrap().0,
        b"neighbour"
    );
}

pub(crate) fn delete_bodies_removes_exactly_the_prefix<H: Harness>() {
    let (h, _) = setup::<H>();
    for key in [
        "BlockList/ads/0",
        "BlockList/ads/1",
        "BlockList/ads2/0",
        "BlockList/ad/0",
        "Zone/ads/0",
    ] {
        put(&h, key, key.as_bytes());
    }
    assert_eq!(h.store().delete_bodies("BlockList/ads/").unwrap(), 2);
    assert_eq!(
        keys(&h),
        ["BlockList/ad/0", "BlockList/ads2/0", "Zone/ads/0"]
    );
    assert_eq!(h.store().delete_bodies("BlockList/ads/").unwrap(), 0);
    assert_eq!(h.store().delete_bodies("Nothing/").unwrap(), 0);
    assert_eq!(
        h.store().get_body("BlockList/ads2/0").unwrap().unwrap().0,
        b"BlockList/ads2/0"
    );
}

pub(crate) fn delete_bodies_with_empty_prefix_removes_all<H: Harness>() {
    let (h, _) = setup::<H>();
    put(&h, "a", b"1");
    put(&h, "b/c", b"2");
    assert_eq!(h.store().delete_bodies("").unwrap(), 2);
    assert!(keys(&h).is_empty());
}

pub(crate) fn body_keys_are_in_byte_order<H: Harness>() {
    let (h, _) = setup::<H>();
    assert!(keys(&h).is_empty());
    for key in ["b/1", "B/2", "a/10", "a/9", "é/0"] {
        put(&h, key, b"x");
    }
    assert_eq!(keys(&h), ["B/2", "a/10", "a/9", "b/1", "é/0"]);
}

pub(crate) fn body_key_empty_or_over_512_bytes_is_invalid_and_changes_nothing<H: Harness>() {
    let (h, _) = setup::<H>();
    let longest = "k".repeat(MAX_BODY_KEY_BYTES);
    put(&h, &longest, b"fits");
    // 511 ASCII bytes and one two-byte character: 513 bytes, 512 characters.
    let too_long = format!("{}é", "k".repeat(MAX_BODY_KEY_BYTES - 1));
    for key in [too_long.as_str(), ""] {
        let error = h
            .store()
            .put_body(key, b"x", &meta(b"x", None, 1))
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::Invalid { field, .. } if field == "key"),
            "{key:?}: {error}"
        );
        assert!(matches!(
            h.store().get_body(key),
            Err(StoreError::Invalid { .. })
        ));
    }
    assert_eq!(keys(&h), [longest]);
}

pub(crate) fn body_meta_that_does_not_describe_the_body_is_invalid_and_changes_nothing<
    H: Harness,
>() {
    let (h, _) = setup::<H>();
    put(&h, "BlockList/ads/0", b"first");
    let mut wrong_sha = meta(b"second", None, 2);
    wrong_sha.sha256[0] ^= 1;
    let mut wrong_length = meta(b"second", None, 2);
    wrong_length.bytes = 7;
    for (bad, field) in [(wrong_sha, "meta.sha256"), (wrong_length, "meta.bytes")] {
        let error = h
            .store()
            .put_body("BlockList/ads/0", b"second", &bad)
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::Invalid { field: f, .. } if f == field),
            "{field}: {error}"
        );
    }
    assert_eq!(
        h.store().get_body("BlockList/ads/0").unwrap().unwrap().0,
        b"first"
    );
}

pub(crate) fn bodies_are_not_objects_no_revision_no_audit<H: Harness>() {
    let (h, _) = setup::<H>();
    let revision = h.store().revision().unwrap();
    put(&h, "BlockList/ads/0", b"x");
    h.store().delete_bodies("").unwrap();
    assert_eq!(h.store().revision().unwrap(), revision);
    assert!(
        h.store()
            .audit_query(&AuditQuery::default())
            .unwrap()
            .is_empty()
    );
}
