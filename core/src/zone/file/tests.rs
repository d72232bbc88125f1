use super::*;
use crate::policy::name::to_wire;

fn apex() -> Vec<u8> {
    to_wire("corp.example.").unwrap()
}

fn no_include(path: &str) -> Result<Included, String> {
    Err(format!("no include expected ({path})"))
}

fn parse(text: &str) -> Result<ZoneData, ZoneError> {
    parse_zone_file(
        "corp.example.zone",
        text.as_bytes(),
        &apex(),
        &Limits::default(),
        &mut no_include,
    )
}

fn name(text: &str) -> Box<[u8]> {
    let mut wire = Vec::new();
    for label in text.trim_end_matches('.').split('.') {
        wire.push(label.len() as u8);
        wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    wire.push(0);
    wire.into()
}

const ZONE: &str = "\
$ORIGIN corp.example.
$TTL 300
; a comment line

@   IN SOA ns1 hostmaster ( 2024010101 ; serial
        3600 600 604800 60 )
    IN NS  ns1
ns1 IN A   192.0.2.53
WWW 60 IN A 192.0.2.1
        IN AAAA 2001:db8::1
mail.corp.example. IN MX 10 www
*.wild IN TXT \"hello world\"
$ORIGIN sub.corp.example.
host IN A 192.0.2.7
";

#[test]
fn origin_ttl_relative_names_and_lines() {
    let data = parse(ZONE).unwrap();
    let summary: Vec<(Box<[u8]>, u16, u32, &str)> = data
        .records
        .iter()
        .zip(&data.origins)
        .map(|(r, o)| (r.owner.clone(), r.rtype, r.ttl, o.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            (name("corp.example"), 6, 300, "corp.example.zone:5"),
            (name("corp.example"), 2, 300, "corp.example.zone:7"),
            (name("ns1.corp.example"), 1, 300, "corp.example.zone:8"),
            (name("www.corp.example"), 1, 60, "corp.example.zone:9"),
            (name("www.corp.example"), 28, 300, "corp.example.zone:10"),
            (name("mail.corp.example"), 15, 300, "corp.example.zone:11"),
            (name("*.wild.corp.example"), 16, 300, "corp.example.zone:12"),
            (
                name("host.sub.corp.example"),
                1,
                300,
                "corp.example.zone:14"
            ),
        ]
    );
    assert_eq!(&*data.records[2].rdata, &[192, 0, 2, 53]);
    // MX: preference, then the exchange uncompressed and as written, made absolute.
    let mut mx = vec![0, 10];
    mx.extend_from_slice(&name("www.corp.example"));
    assert_eq!(&*data.records[5].rdata, &mx[..]);
    assert_eq!(&*data.records[6].rdata, b"\x0bhello world");
    assert_eq!(&*data.apex, &apex()[..]);
}

#[test]
fn rdata_names_keep_their_case() {
    let data = parse("@ 60 IN CNAME Target.Corp.Example.\n").unwrap();
    assert_eq!(
        &*data.records[0].rdata,
        b"\x06Target\x04Corp\x07Example\x00"
    );
}

#[test]
fn a_syntax_error_names_file_and_line() {
    let error = parse("@ 60 IN A 192.0.2.1\n\nwww 60 IN A not-an-address\n").unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("corp.example.zone:3"));
    assert!(matches!(error.kind, ZoneErrorKind::Syntax(_)), "{error}");
    let error = parse("@ 60 IN BOGUSTYPE x\n").unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("corp.example.zone:1"));
    let error = parse("@ 60 IN SOA ns1 host ( 1 2 3 4 5\n").unwrap_err();
    assert!(error.origin.unwrap().starts_with("corp.example.zone"));
}

#[test]
fn out_of_zone_data_names_file_and_line() {
    let error = parse("@ 60 IN A 192.0.2.1\nwww.other.example. 60 IN A 192.0.2.1\n").unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("corp.example.zone:2"));
    assert_eq!(
        error.kind,
        ZoneErrorKind::OutOfZone("www.other.example".into())
    );
    // A name that only ends with the apex's text is not in it.
    let error = parse("xcorp.example. 60 IN A 192.0.2.1\n").unwrap_err();
    assert!(matches!(error.kind, ZoneErrorKind::OutOfZone(_)));
}

#[test]
fn another_class_is_refused() {
    let error = parse("@ 60 CH TXT \"x\"\n").unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("corp.example.zone:1"));
}

#[test]
fn includes_are_read_through_the_reader_with_their_own_lines() {
    let mut asked = Vec::new();
    let mut reader = |path: &str| {
        asked.push(path.to_owned());
        match path {
            "hosts.zone" => Ok(Included {
                name: "hosts.zone".into(),
                text: b"\nhost1 60 IN A 192.0.2.1\n$INCLUDE deeper.zone\n".to_vec(),
            }),
            "deeper.zone" => Ok(Included {
                name: "deeper.zone".into(),
                text: b"host2 60 IN A 192.0.2.2\n".to_vec(),
            }),
            "other.zone" => Ok(Included {
                name: "other.zone".into(),
                text: b"@ 60 IN A 192.0.2.3\n".to_vec(),
            }),
            _ => Err("outside zones.fileDir".into()),
        }
    };
    let text = "@ 60 IN A 192.0.2.9\n$INCLUDE hosts.zone\n$INCLUDE other.zone sub.corp.example.\nafter 60 IN A 192.0.2.4\n";
    let data = parse_zone_file(
        "corp.example.zone",
        text.as_bytes(),
        &apex(),
        &Limits::default(),
        &mut reader,
    )
    .unwrap();
    assert_eq!(asked, ["hosts.zone", "deeper.zone", "other.zone"]);
    let owners: Vec<_> = data.records.iter().map(|r| r.owner.clone()).collect();
    assert_eq!(
        owners,
        [
            name("corp.example"),
            name("host1.corp.example"),
            name("host2.corp.example"),
            name("sub.corp.example"),
            name("after.corp.example"),
        ]
    );
    assert_eq!(
        data.origins,
        [
            "corp.example.zone:1",
            "hosts.zone:2",
            "deeper.zone:1",
            "other.zone:1",
            "corp.example.zone:4"
        ]
    );
}

#[test]
fn a_refused_include_names_the_including_line() {
    let mut reader = |_: &str| -> Result<Included, String> { Err("outside zones.fileDir".into()) };
    let error = parse_zone_file(
        "corp.example.zone",
        b"@ 60 IN A 192.0.2.9\n$INCLUDE ../../etc/passwd\n",
        &apex(),
        &Limits::default(),
        &mut reader,
    )
    .unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("corp.example.zone:2"));
    assert_eq!(
        error.kind,
        ZoneErrorKind::Include("../../etc/passwd: outside zones.fileDir".into())
    );
}

#[test]
fn an_include_loop_stops_at_the_depth_bound() {
    let mut reader = |_: &str| {
        Ok(Included {
            name: "self.zone".into(),
            text: b"$INCLUDE self.zone\n".to_vec(),
        })
    };
    let error = parse_zone_file(
        "self.zone",
        b"$INCLUDE self.zone\n",
        &apex(),
        &Limits::default(),
        &mut reader,
    )
    .unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("self.zone:1"));
    assert!(matches!(error.kind, ZoneErrorKind::Include(_)));
}

#[test]
fn limits_are_errors() {
    let text = "a 60 IN A 192.0.2.1\nb 60 IN A 192.0.2.2\nc 60 IN A 192.0.2.3\n";
    let records = Limits {
        max_records: 2,
        ..Limits::default()
    };
    let error =
        parse_zone_file("z", text.as_bytes(), &apex(), &records, &mut no_include).unwrap_err();
    assert_eq!(error.origin.as_deref(), Some("z:3"));
    assert!(matches!(error.kind, ZoneErrorKind::TooLarge(_)));
    let bytes = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    let error =
        parse_zone_file("z", text.as_bytes(), &apex(), &bytes, &mut no_include).unwrap_err();
    assert!(matches!(error.kind, ZoneErrorKind::TooLarge(_)));
}

#[test]
fn record_sets_parse_with_the_same_scanner() {
    let apex = apex();
    let a = parse_record_set(&apex, "www", "A", 300, &["192.0.2.1", "192.0.2.2"])
        .unwrap()
        .records;
    assert_eq!(a.len(), 2);
    assert_eq!(
        (&*a[0].owner, a[0].rtype, a[0].ttl),
        (&*name("www.corp.example"), 1, 300)
    );
    assert_eq!(&*a[1].rdata, &[192, 0, 2, 2]);
    let at = parse_record_set(&apex, "@", "MX", 60, &["10 mail"])
        .unwrap()
        .records;
    assert_eq!(&*at[0].owner, &*name("corp.example"));
    let mut mx = vec![0, 10];
    mx.extend_from_slice(&name("mail.corp.example"));
    assert_eq!(&*at[0].rdata, &mx[..]);
    let absolute = parse_record_set(&apex, "Host.Corp.Example.", "txt", 60, &["\"a b\" c"])
        .unwrap()
        .records;
    assert_eq!(&*absolute[0].owner, &*name("host.corp.example"));
    assert_eq!(&*absolute[0].rdata, b"\x03a b\x01c");
    let wildcard = parse_record_set(&apex, "*.w", "TYPE65280", 60, &["\\# 2 abcd"])
        .unwrap()
        .records;
    assert_eq!(
        (wildcard[0].rtype, &*wildcard[0].rdata),
        (65280, &[0xab, 0xcd][..])
    );
    assert!(parse_record_set(&apex, "_acme-challenge", "TXT", 60, &["token"]).is_ok());
    let empty = parse_record_set(&apex, "gone", "MX", 60, &[]).unwrap();
    assert_eq!(
        (&*empty.owner, empty.rtype, empty.records.len()),
        (&*name("gone.corp.example"), 15, 0)
    );

    let error = |name, rtype, records: &[&str]| {
        parse_record_set(&apex, name, rtype, 60, records).unwrap_err()
    };
    assert_eq!(error("www", "A", &["192.0.2.1", "nope"]).0, Some(1));
    assert_eq!(
        error("www", "A", &["192.0.2.1\nevil 60 IN A 1.2.3.4"]).0,
        Some(0)
    );
    assert_eq!(error("www", "A", &["192.0.2.1 192.0.2.2"]).0, Some(0));
    assert_eq!(error("www", "NOPE", &["x"]).0, None);
    assert_eq!(error("www x", "A", &["192.0.2.1"]).0, None);
    assert_eq!(error("$ORIGIN", "A", &["192.0.2.1"]).0, None);
    assert_eq!(error("www.other.example.", "A", &["192.0.2.1"]).0, None);
}

#[test]
fn in_zone_cuts_on_label_boundaries() {
    let apex = apex();
    assert!(in_zone(&apex, &apex));
    assert!(in_zone(&name("a.b.corp.example"), &apex));
    assert!(!in_zone(&name("xcorp.example"), &apex));
    assert!(!in_zone(&name("example"), &apex));
    assert!(in_zone(&name("anything"), &[0]));
}

#[test]
fn rdata_prints_back_to_the_same_wire_form() {
    let apex = apex();
    for (rtype, text) in [
        ("A", "192.0.2.1"),
        ("AAAA", "2001:db8::1"),
        ("MX", "10 mail"),
        ("CNAME", "Target.Elsewhere.Example."),
        ("TXT", "\"a b\" \"c\""),
        ("SOA", "ns1 hostmaster 7 3600 600 604800 300"),
        ("SRV", "0 5 443 www"),
        ("CAA", "0 issue \"ca.example\""),
        ("TYPE65280", "\\# 2 abcd"),
    ] {
        let parsed = parse_record_set(&apex, "x", rtype, 60, &[text]).unwrap();
        let record = &parsed.records[0];
        let printed = rdata_text(record.rtype, &record.rdata);
        let again = parse_record_set(&apex, "x", &type_text(record.rtype), 60, &[&printed])
            .unwrap_or_else(|e| panic!("{rtype} {printed:?}: {e:?}"));
        assert_eq!(again.records[0].rdata, record.rdata, "{rtype}: {printed}");
    }
    assert_eq!(rdata_text(1, &[192, 0, 2, 1]), "192.0.2.1");
    assert_eq!(rdata_text(1, &[1, 2]), "\\# 2 0102", "malformed A");
}
