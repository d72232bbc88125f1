//! The patched quinn (transports/vendor/quinn.patch) lets a connection's application answer
//! the packets that just arrived before the connection transmits, so the answers and the
//! acknowledgement of those packets share one datagram. quinn 0.11.12 as published transmitted
//! first: when two ack-eliciting packets arrived together (RFC 9000 section 13.2.2 asks for an
//! immediate ACK then), it sent an ACK-only datagram and the answers in a second one, ~20 % more
//! datagrams from a paced DoQ server (docs/benchmarks.md).
//!
//! Client, relay and server share one glommio executor, so the order is deterministic: the
//! relay holds the client's two query datagrams and releases them back to back, and the
//! server's endpoint reads both before its connection runs. The server answers inside its
//! connection task, as kudurru's DoQ and DoH3 do.

mod support;

use std::cell::RefCell;
use std::net::{SocketAddr, UdpSocket as StdUdpSocket};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::net::UdpSocket;
use kudurru_transports::quic::client_endpoint;
use kudurru_transports::sys;

/// How long any one step may take before the test calls it stuck (no speed requirement).
const STUCK: Duration = Duration::from_secs(5);

/// What the relay between client and server does and has seen.
#[derive(Default)]
struct Relay {
    client: Option<SocketAddr>,
    /// Client datagrams are held here instead of forwarded while `holding`.
    holding: bool,
    held: Vec<Vec<u8>>,
    /// Server datagrams forwarded to the client.
    from_server: usize,
}

/// Forwards datagrams between the client (whoever sends from elsewhere than `server`) and
/// `server`: receives on `socket` (glommio's handle), sends on `io` (the same socket,
/// non-blocking, so a send never yields to other tasks).
async fn relay(
    socket: UdpSocket,
    io: Rc<StdUdpSocket>,
    server: SocketAddr,
    state: Rc<RefCell<Relay>>,
) {
    let mut buf = vec![0u8; 65_536];
    while let Ok((n, from)) = socket.recv_from(&mut buf).await {
        let to = {
            let mut state = state.borrow_mut();
            if from == server {
                state.from_server += 1;
                state.client
            } else {
                state.client = Some(from);
                if state.holding {
                    state.held.push(buf[..n].to_vec());
                    continue;
                }
                Some(server)
            }
        };
        if let Some(to) = to {
            let _ = io.send_to(&buf[..n], to);
        }
    }
}

/// Sleeps in short steps until `done`, or fails after [`STUCK`].
async fn until(what: &str, done: impl Fn() -> bool) -> Result<(), String> {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > STUCK {
            return Err(format!("stuck waiting for {what}"));
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// One query stream: sends `query`, finishes, returns the receiving half.
async fn send_query(
    connection: &quinn::Connection,
    query: &[u8],
) -> Result<quinn::RecvStream, String> {
    let (mut send, recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(query).await.map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    Ok(recv)
}

async fn read_answer(mut recv: quinn::RecvStream) -> Result<Vec<u8>, String> {
    recv.read_to_end(1024).await.map_err(|e| e.to_string())
}

/// The server: every stream's bytes come back reversed, answered inside the connection task.
async fn serve(endpoint: quinn::Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        glommio::spawn_local(async move {
            let Ok(connection) = incoming.await else {
                return;
            };
            while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                let Ok(mut query) = recv.read_to_end(1024).await else {
                    continue;
                };
                query.reverse();
                let _ = send.write_all(&query).await;
                let _ = send.finish();
            }
        })
        .detach();
    }
}

#[test]
fn answers_to_packets_that_arrived_together_leave_with_their_ack_in_one_datagram() {
    let outcome = support::executor(|| async {
        let (server_config, client_config) =
            support::quic_configs(quinn::TransportConfig::default())?;
        let (server, server_addr) = support::quic_server(server_config)?;
        glommio::spawn_local(serve(server)).detach();

        let io = StdUdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        io.set_nonblocking(true).map_err(|e| e.to_string())?;
        let relay_addr = io.local_addr().map_err(|e| e.to_string())?;
        let socket = sys::glommio_udp(OwnedFd::from(io.try_clone().map_err(|e| e.to_string())?));
        let io = Rc::new(io);
        let state = Rc::new(RefCell::new(Relay::default()));
        glommio::spawn_local(relay(socket, io.clone(), server_addr, state.clone())).detach();

        let client = client_endpoint("127.0.0.1:0".parse().unwrap()).map_err(|e| e.to_string())?;
        let connection = client
            .connect_with(client_config, relay_addr, "localhost")
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;

        // One exchange, then quiet: the handshake's trailing frames (HANDSHAKE_DONE, new
        // connection IDs, tokens) and delayed ACKs (25 ms at most) are all sent.
        let warm = read_answer(send_query(&connection, b"warm").await?).await?;
        if warm != b"mraw" {
            return Err(format!("warm-up answered {warm:?}"));
        }
        glommio::timer::sleep(Duration::from_millis(100)).await;

        // Two queries in two datagrams, held, then released together.
        state.borrow_mut().holding = true;
        let first = send_query(&connection, b"first").await?;
        until("the first query's datagram", || {
            !state.borrow().held.is_empty()
        })
        .await?;
        let second = send_query(&connection, b"second").await?;
        until("the second query's datagram", || {
            state.borrow().held.len() >= 2
        })
        .await?;
        let (held, before) = {
            let mut state = state.borrow_mut();
            state.holding = false;
            (std::mem::take(&mut state.held), state.from_server)
        };
        if held.len() != 2 {
            return Err(format!(
                "the client sent {} datagrams for two queries",
                held.len()
            ));
        }
        // Back to back, no task runs in between: the server's endpoint reads both at once.
        for datagram in &held {
            io.send_to(datagram, server_addr)
                .map_err(|e| e.to_string())?;
        }
        let (first, second) = (read_answer(first).await?, read_answer(second).await?);
        if (first.as_slice(), second.as_slice()) != (b"tsrif".as_slice(), b"dnoces".as_slice()) {
            return Err(format!("answered {first:?} and {second:?}"));
        }
        let datagrams = state.borrow().from_server - before;
        if datagrams != 1 {
            return Err(format!(
                "the server sent {datagrams} datagrams for two answers and their ACK, not 1"
            ));
        }
        Ok(())
    })
    .join()
    .expect("executor thread");
    outcome.expect("test body");
}
