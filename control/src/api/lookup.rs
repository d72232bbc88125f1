//! `GET /api/v1/lookup?name=&type=`: a DNS query through the node itself, for the dashboard's
//! Tools page. The query goes to the node's first plain-DNS UDP listener (its loopback address
//! when the listener is on every address), exactly as a client's would: the cache, blocking,
//! zones, the rate limiter and the query log all see it, from a loopback client.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr as _;
use std::time::{Duration, Instant};

use domain::base::iana::Rtype;
use domain::base::message::RecordSection;
use domain::base::{Message, MessageBuilder, Name, ParsedName};
use domain::rdata::AllRecordData;
use serde_json::{Value, json};

use super::{Reply, error, ok};
use crate::http::HttpError;
use crate::objects::routes::Query;
use kudurru_transports::{ListenerSpec, Protocol};

/// How long the lookup waits for the node's answer.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The EDNS payload size the lookup offers (RFC 9715's advice for UDP).
const PAYLOAD: u16 = 1232;

/// A checked lookup: the name and type to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    name: Name<Vec<u8>>,
    rtype: Rtype,
}

/// Parses `name=` (required) and `type=` (a mnemonic such as `AAAA` or `TYPE65`; default A).
pub fn parse_lookup(query: &str) -> Result<Lookup, Reply> {
    let query = Query::parse(query).map_err(Reply::from)?;
    let invalid = |key: &str, message: String| {
        Reply::from(HttpError::new(400, "invalid_value", message).with_key(key))
    };
    let text = query
        .get("name")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("name", "name is required (a domain name)".into()))?;
    let absolute = if text.ends_with('.') {
        text.to_owned()
    } else {
        format!("{text}.")
    };
    let name = Name::<Vec<u8>>::from_str(&absolute)
        .map_err(|e| invalid("name", format!("{text:?} is not a domain name: {e}")))?;
    let rtype = match query.get("type") {
        None | Some("") => Rtype::A,
        Some(t) => Rtype::from_str(&t.to_ascii_uppercase()).map_err(|_| {
            invalid(
                "type",
                format!("{t:?} is not a record type (A, AAAA, MX, TYPE65, ...)"),
            )
        })?,
    };
    Ok(Lookup { name, rtype })
}

/// The address the lookup asks: the first plain-DNS UDP listener, on loopback when it listens
/// on every address.
pub(super) fn lookup_target(listeners: &[ListenerSpec]) -> Option<SocketAddr> {
    let spec = listeners
        .iter()
        .find(|l| matches!(l.protocol, Protocol::Dns { udp: true, .. }))?;
    let mut addr = spec.addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    Some(addr)
}

fn query_message(lookup: &Lookup, id: u16) -> Result<Vec<u8>, String> {
    let mut builder = MessageBuilder::new_vec();
    builder.header_mut().set_id(id);
    builder.header_mut().set_rd(true);
    let mut question = builder.question();
    question
        .push((&lookup.name, lookup.rtype))
        .map_err(|e| e.to_string())?;
    let mut additional = question.additional();
    additional
        .opt(|opt| {
            opt.set_udp_payload_size(PAYLOAD);
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    Ok(additional.finish())
}

fn section(records: RecordSection<'_, &[u8]>) -> Vec<Value> {
    records
        .limit_to_in::<AllRecordData<_, ParsedName<_>>>()
        .filter_map(Result::ok)
        .map(|r| {
            json!({
                "name": r.owner().to_string(),
                "type": r.rtype().to_string(),
                "ttl": r.ttl().as_secs(),
                "data": r.data().to_string(),
            })
        })
        .collect()
}

/// The answer of `reply` as JSON; `None` when it does not parse.
pub(super) fn describe(reply: &[u8]) -> Option<Value> {
    let message = Message::from_octets(reply).ok()?;
    let header = message.header();
    let flags: Vec<&str> = [
        ("qr", header.qr()),
        ("aa", header.aa()),
        ("tc", header.tc()),
        ("rd", header.rd()),
        ("ra", header.ra()),
        ("ad", header.ad()),
        ("cd", header.cd()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    let answer = message.answer().ok()?;
    let authority = message.authority().ok()?;
    Some(json!({
        "rcode": message.opt_rcode().to_string(),
        "flags": flags,
        "truncated": header.tc(),
        "answers": section(answer),
        "authority": section(authority),
    }))
}

/// Asks `target` over UDP and answers the lookup's JSON: 504 without an answer in time.
pub(super) async fn run(lookup: Lookup, target: SocketAddr) -> Reply {
    let id: u16 = rand::random();
    let query = match query_message(&lookup, id) {
        Ok(query) => query,
        Err(e) => {
            return error(
                400,
                "invalid_value",
                format!("the query cannot be built: {e}"),
            );
        }
    };
    let local: SocketAddr = match target {
        SocketAddr::V4(_) => (Ipv4Addr::LOCALHOST, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::LOCALHOST, 0).into(),
    };
    let started = Instant::now();
    let exchanged = async {
        let socket = tokio::net::UdpSocket::bind(local).await?;
        socket.connect(target).await?;
        socket.send(&query).await?;
        let mut buffer = vec![0u8; usize::from(PAYLOAD).max(4096)];
        loop {
            let n = socket.recv(&mut buffer).await?;
            let reply = buffer.get(..n).unwrap_or_default();
            // Anything but the answer to this ID is ignored until the timeout.
            if reply.get(..2) == Some(&id.to_be_bytes()[..]) {
                return Ok::<_, std::io::Error>(reply.to_vec());
            }
        }
    };
    let reply = match tokio::time::timeout(LOOKUP_TIMEOUT, exchanged).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => return error(502, "lookup_failed", format!("asking {target}: {e}")),
        Err(_) => {
            return error(
                504,
                "lookup_timeout",
                format!(
                    "{target} did not answer within {} s",
                    LOOKUP_TIMEOUT.as_secs()
                ),
            );
        }
    };
    let elapsed = started.elapsed();
    let Some(mut body) = describe(&reply) else {
        return error(
            502,
            "lookup_failed",
            format!("{target} answered a message that does not parse"),
        );
    };
    body["name"] = lookup.name.to_string().into();
    body["type"] = lookup.rtype.to_string().into();
    body["server"] = target.to_string().into();
    body["transport"] = "udp".into();
    body["timeMs"] = json!((elapsed.as_secs_f64() * 1e6).round() / 1e3);
    ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lookup_needs_a_name_and_a_known_type() {
        let lookup = parse_lookup("name=example.com&type=aaaa").unwrap();
        assert_eq!(
            (lookup.name.to_string(), lookup.rtype),
            ("example.com".into(), Rtype::AAAA)
        );
        assert_eq!(parse_lookup("name=example.com.").unwrap().rtype, Rtype::A);
        assert_eq!(
            parse_lookup("name=x&type=TYPE65").unwrap().rtype,
            Rtype::HTTPS
        );
        let key = |q: &str| parse_lookup(q).unwrap_err().body["key"].clone();
        assert_eq!(key(""), "name");
        assert_eq!(key("name=a..b"), "name");
        assert_eq!(key("name=x&type=NOPE"), "type");
    }

    #[test]
    fn the_target_is_the_first_udp_listener_on_loopback() {
        let spec = |addr: &str, udp: bool| ListenerSpec {
            addr: addr.parse().unwrap(),
            protocol: Protocol::Dns { udp, tcp: true },
        };
        assert_eq!(
            lookup_target(&[spec("127.0.0.2:53", false), spec("0.0.0.0:5300", true)]),
            Some("127.0.0.1:5300".parse().unwrap())
        );
        assert_eq!(
            lookup_target(&[spec("[::]:53", true)]),
            Some("[::1]:53".parse().unwrap())
        );
        assert_eq!(lookup_target(&[spec("127.0.0.1:53", false)]), None);
    }

    #[test]
    fn an_answer_is_described_in_presentation_format() {
        let lookup = parse_lookup("name=example.com&type=A").unwrap();
        let query = query_message(&lookup, 7).unwrap();
        let request = Message::from_octets(query.as_slice()).unwrap();
        let mut answer = MessageBuilder::new_vec()
            .start_answer(&request, domain::base::iana::Rcode::NOERROR)
            .unwrap();
        answer
            .push((
                &lookup.name,
                300,
                domain::rdata::A::from_octets(192, 0, 2, 1),
            ))
            .unwrap();
        let body = describe(&answer.finish()).unwrap();
        assert_eq!(body["rcode"], "NOERROR");
        assert_eq!(
            body["answers"],
            json!([{"name": "example.com", "type": "A", "ttl": 300, "data": "192.0.2.1"}])
        );
        assert!(body["flags"].as_array().unwrap().contains(&json!("qr")));
        assert!(describe(b"\x00").is_none());
    }
}
