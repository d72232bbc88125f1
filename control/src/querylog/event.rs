//! One query-log event as the writer hands it to the sinks: the core's record decoded, its
//! messages summarized, the client's group found and its privacy applied.

use std::net::IpAddr;

use kudurru_core::querylog::{Privacy, Source, Summary, Transport};

/// The client as the privacy mode keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientView {
    /// The address as it came (`full`).
    Full(IpAddr),
    /// The network: IPv4 /24 or IPv6 /48 (`truncate`), the address with the host bits zero.
    Truncated(IpAddr, u8),
    /// A keyed HMAC pseudonym (`pseudonymize`), rendered `p-` and 16 hex digits.
    Pseudonym(String),
    /// No client (`none`, and `omit`).
    Hidden,
}

impl ClientView {
    /// The text stored and shown: `192.0.2.7`, `192.0.2.0/24`, `p-3f2a…`, or empty.
    pub fn render(&self) -> String {
        match self {
            Self::Full(address) => address.to_string(),
            Self::Truncated(network, bits) => format!("{network}/{bits}"),
            Self::Pseudonym(p) => p.clone(),
            Self::Hidden => String::new(),
        }
    }
}

/// One answered or dropped query.
#[derive(Debug, Clone)]
pub struct Event {
    /// When, ns since the Unix epoch.
    pub time_ns: u64,
    /// How it arrived.
    pub transport: Transport,
    /// Where the answer came from.
    pub source: Source,
    /// `kudurru_core::querylog::flags` bits of the record.
    pub record_flags: u8,
    /// The client, privacy applied.
    pub client: ClientView,
    /// The client's port (0 unless privacy is `full`).
    pub port: u16,
    /// The client ID, empty when none.
    pub client_id: String,
    /// The group whose privacy applied (`default` for clients in no group).
    pub group: String,
    /// The privacy mode applied.
    pub privacy: Privacy,
    /// The policy that blocked or rewrote, empty when none.
    pub policy: String,
    /// The list whose rule decided, empty when none.
    pub list: String,
    /// The rule as its list writes it, empty when none.
    pub rule: String,
    /// The upstream that answered, empty when none.
    pub upstream: String,
    /// Its latency in microseconds.
    pub upstream_latency_us: u32,
    /// The query and response messages as on the wire (empty response: nothing sent).
    pub query: Vec<u8>,
    /// The response.
    pub response: Vec<u8>,
    /// What the messages say.
    pub summary: Summary,
}

#[cfg(test)]
impl Event {
    /// A cache answer over UDP to `client` at 2025-12-06T05:46:40.123456789Z, port 53000,
    /// privacy `full`, for the sinks' tests.
    pub(crate) fn sample(client: ClientView) -> Self {
        Self {
            time_ns: 1_765_000_000_123_456_789,
            transport: Transport::Udp,
            source: Source::Cache,
            record_flags: 0,
            client,
            port: 53_000,
            client_id: String::new(),
            group: "default".into(),
            privacy: Privacy::Full,
            policy: String::new(),
            list: String::new(),
            rule: String::new(),
            upstream: String::new(),
            upstream_latency_us: 0,
            query: b"query-bytes".to_vec(),
            response: b"response-bytes".to_vec(),
            summary: Summary::default(),
        }
    }
}
