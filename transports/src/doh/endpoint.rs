//! What the DoH listeners of every HTTP version share: the [`Endpoint`] of a connection, the
//! [`classify`] step from a request to a DNS answer (or a miss to resolve), and the
//! [`ResponseHead`] HTTP/2 and HTTP/3 send. The version-neutral rules themselves (request
//! checks, statuses and error bodies) are `kudurru_core::doh`'s.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use kudurru_core::doh::{self, ClientId, Request, RequestError, Status};
use kudurru_core::http::{BodyError, Method};
use kudurru_core::{Client, Settings};

use crate::answer::{Lookup, Now, Origin, answer, answer_now};
use crate::connections::Admission;
use crate::metrics::Transport;
use crate::worker::Worker;

/// How long a closing connection keeps reading what the client still sends (HTTP/1.1 after
/// its last response, HTTP/2 after GOAWAY): closing with unread bytes makes the kernel send a
/// reset, which can destroy the response before the client reads it.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(1);

/// What every request on one connection shares.
pub(crate) struct Endpoint {
    pub(crate) worker: Rc<Worker>,
    /// The one path served.
    pub(crate) path: Rc<str>,
    /// The TLS server name the connection's client sent (a path's client ID wins over it).
    sni: Option<Rc<str>>,
    pub(crate) peer: SocketAddr,
    /// The `Alt-Svc` value advertising DNS over HTTP/3 (RFC 7838), when it is served.
    pub(crate) alt_svc: Option<Rc<str>>,
    /// The connection's place in the core's table, touched by every request.
    admission: Rc<Admission>,
}

/// A response to a request that reached the endpoint.
pub(crate) enum Reply {
    /// 200 with a DNS answer.
    Answer(Vec<u8>),
    /// An error status with its reason.
    Error(Status),
    /// The pipeline dropped the query: abort, send nothing.
    Abort,
}

impl Endpoint {
    /// The connection's place in the core's table (its drain signal).
    pub(crate) fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The endpoint of one connection from `peer`, which sent the TLS server name `sni`.
    pub(crate) fn new(
        worker: Rc<Worker>,
        path: Rc<str>,
        peer: SocketAddr,
        sni: Option<Rc<str>>,
        alt_svc: Option<Rc<str>>,
        admission: Rc<Admission>,
    ) -> Self {
        Self {
            worker,
            path,
            sni,
            peer,
            alt_svc,
            admission,
        }
    }

    /// The client of a request whose path carried `path_id`.
    pub(crate) fn client<'a>(&'a self, path_id: Option<&'a ClientId>) -> Client<'a> {
        Client {
            addr: self.peer.ip(),
            datagram: false,
            id: path_id.map(ClientId::as_str),
            sni: self.sni.as_deref(),
        }
    }

    /// Where this connection's queries come from, for the query log.
    pub(crate) fn origin(&self, transport: Transport) -> Origin {
        Origin {
            transport,
            peer: self.peer,
        }
    }

    /// Answers one DNS message that a valid request carried, its path's client ID `path_id`.
    pub(crate) async fn resolve(&self, message: &[u8], path_id: Option<ClientId>) -> Reply {
        let received = std::time::Instant::now();
        self.admission.touch(received);
        if let Err(e) = doh::check_message(message) {
            return Reply::Error(e.into());
        }
        match answer(
            &self.worker,
            self.origin(Transport::Doh),
            message,
            self.client(path_id.as_ref()),
            received,
        )
        .await
        {
            Some(out) => Reply::Answer(out),
            None => Reply::Abort,
        }
    }

    /// Counts a rejected request and logs it at debug.
    pub(crate) fn rejected(&self, status: Status) {
        self.worker.context().metrics.doh_rejected(status.code);
        tracing::debug!(peer = %self.peer, status = status.code, reason = status.reason, "DoH request rejected");
    }
}

/// The `Date` of a response (RFC 9110 §6.6.1, required of a server with a clock), formatted
/// once a second per core.
pub(crate) fn date() -> Rc<str> {
    thread_local! {
        static DATE: RefCell<(u64, Rc<str>)> = RefCell::new((u64::MAX, Rc::from("")));
    }
    let now = std::time::SystemTime::now();
    let second = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != second {
            *cached = (second, Rc::from(httpdate::fmt_http_date(now)));
        }
        cached.1.clone()
    })
}

/// A request answered at once, or a miss to resolve under the snapshot it was admitted under
/// (with the instant it was received, which its answer's latency counts from).
pub(crate) enum Answer {
    Ready(Reply),
    Miss(
        Vec<u8>,
        Arc<Settings>,
        Lookup,
        Option<ClientId>,
        std::time::Instant,
    ),
}

/// Classifies one HTTP/2 or HTTP/3 request (counted as a query on `transport`) and answers it
/// if that needs no waiting.
pub(crate) fn classify(
    endpoint: &Endpoint,
    transport: Transport,
    method: Method,
    target: &[u8],
    content_type: Option<&[u8]>,
    body: Result<Vec<u8>, BodyError>,
) -> Answer {
    endpoint.worker.context().metrics.query(transport);
    let received = std::time::Instant::now();
    endpoint.admission.touch(received);
    let message = match (
        doh::request(method.as_bytes(), target, &endpoint.path, content_type),
        body,
    ) {
        (_, Err(BodyError::HeadTooLarge)) => {
            return Answer::Ready(Reply::Error(RequestError::HeadTooLarge.into()));
        }
        (Err(e), _) => return Answer::Ready(Reply::Error(e.into())),
        (Ok(Request::Get(message)), _) => message,
        (Ok(Request::Post), Ok(body)) => body,
        (Ok(Request::Post), Err(BodyError::TimedOut)) => {
            return Answer::Ready(Reply::Error(Status::TIMEOUT));
        }
        (Ok(Request::Post), Err(_)) => {
            return Answer::Ready(Reply::Error(RequestError::TooLarge.into()));
        }
    };
    if let Err(e) = doh::check_message(&message) {
        return Answer::Ready(Reply::Error(e.into()));
    }
    let settings = endpoint.worker.context().settings();
    let mut out = Vec::with_capacity(512);
    let path_id = doh::client_id(target, &endpoint.path);
    match answer_now(
        &endpoint.worker,
        &settings,
        endpoint.origin(transport),
        &message,
        endpoint.client(path_id.as_ref()),
        received,
        &mut out,
    ) {
        Now::Answered => Answer::Ready(Reply::Answer(out)),
        Now::Dropped => Answer::Ready(Reply::Abort),
        Now::Miss(lookup) => Answer::Miss(
            message,
            arc_swap::Guard::into_inner(settings),
            lookup,
            path_id,
            received,
        ),
    }
}

/// A response field: name, value, and whether the value repeats across responses (worth
/// remembering in an HPACK table).
pub(crate) type HeadField<'a> = (&'static [u8], &'a [u8], bool);

/// The head of a DoH response as HTTP/2 and HTTP/3 send it: `:status` and the fields.
pub(crate) struct ResponseHead {
    pub(crate) status: u16,
    content_type: &'static str,
    date: Rc<str>,
    length: Decimal,
    max_age: Option<Decimal>,
    alt_svc: Option<Rc<str>>,
}

impl ResponseHead {
    /// The head and body answering `reply`; `None` when the request is to be aborted. Counts
    /// a rejection.
    pub(crate) fn new(endpoint: &Endpoint, reply: Reply) -> Option<(Self, Vec<u8>)> {
        let (status, content_type, payload) = match reply {
            Reply::Answer(out) => (200, doh::MEDIA_TYPE, out),
            Reply::Error(status) => {
                endpoint.rejected(status);
                (status.code, "application/json", status.body())
            }
            Reply::Abort => return None,
        };
        let head = Self {
            status,
            content_type,
            date: date(),
            length: Decimal::new("", payload.len() as u64),
            max_age: (status == 200)
                .then(|| Decimal::new("max-age=", u64::from(doh::max_age(&payload)))),
            alt_svc: endpoint.alt_svc.clone(),
        };
        Some((head, payload))
    }

    /// The most fields a response has: [`Self::fields`]'s array is this long.
    pub(crate) const MAX_FIELDS: usize = 6;

    /// Each field as (name, value, whether the value repeats across responses).
    pub(crate) fn fields(&self) -> impl Iterator<Item = HeadField<'_>> {
        let fields: [Option<HeadField<'_>>; Self::MAX_FIELDS] = [
            Some((&b"date"[..], self.date.as_bytes(), true)),
            Some((&b"content-type"[..], self.content_type.as_bytes(), true)),
            Some((&b"content-length"[..], self.length.as_bytes(), false)),
            self.max_age
                .as_ref()
                .map(|age| (&b"cache-control"[..], age.as_bytes(), false)),
            (self.status == 405).then_some((&b"allow"[..], &b"GET, POST"[..], true)),
            self.alt_svc
                .as_ref()
                .map(|alt_svc| (&b"alt-svc"[..], alt_svc.as_bytes(), true)),
        ];
        fields.into_iter().flatten()
    }
}

/// A prefix and a decimal number, formatted without allocating.
pub(crate) struct Decimal {
    bytes: [u8; 32],
    len: usize,
}

impl Decimal {
    /// `prefix` (at most 12 bytes) followed by `n` in decimal.
    fn new(prefix: &str, n: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = n;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let prefix = &prefix.as_bytes()[..prefix.len().min(12)];
        let len = prefix.len() + digits.len() - at;
        let mut bytes = [0u8; 32];
        bytes[..prefix.len()].copy_from_slice(prefix);
        bytes[prefix.len()..len].copy_from_slice(&digits[at..]);
        Self { bytes, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}
