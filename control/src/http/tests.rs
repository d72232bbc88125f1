//! The HTTP layer against raw sockets: every bound holds, and one slow client stalls only
//! itself.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::*;

/// Small bounds, so the tests see them act.
fn limits() -> Limits {
    Limits {
        header_timeout: Duration::from_millis(300),
        body_timeout: Duration::from_millis(300),
        max_connections: 4,
        shutdown_grace: Duration::from_secs(2),
    }
}

/// Echoes the method and path; `POST /body` reads the body (at most 8 bytes), `GET /slow`
/// answers after 300 ms.
fn handler() -> Handler {
    Arc::new(|request: Request, _peer: SocketAddr| {
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            match path.as_str() {
                "/body" => match read_body(request, 8, limits().body_timeout).await {
                    Ok(body) => respond(200, "text/plain", body),
                    Err(e) => e.into_response(),
                },
                "/stream" => {
                    let mut response = http::Response::new(Chunks(3).boxed_unsync());
                    response.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("text/plain"),
                    );
                    response
                }
                "/slow" => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    respond(200, "text/plain", "slow")
                }
                _ => respond(200, "text/plain", format!("{} {path}", request.method())),
            }
        })
    })
}

/// A body produced piece by piece: `line N` for N counting down, then the end.
struct Chunks(u32);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        if self.0 == 0 {
            return std::task::Poll::Ready(None);
        }
        self.0 -= 1;
        let line = Bytes::from(format!("line {}\n", self.0));
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(line))))
    }
}

/// A listener on a free loopback port, served until the returned sender says stop.
fn start() -> (
    SocketAddr,
    Arc<ListenerStats>,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let listener = Listener::bind("test", "127.0.0.1:0".parse().unwrap(), None, limits()).unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = listener.stats.clone();
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(serve(listener, handler(), stopped));
    (addr, stats, stop, task)
}

/// Sends `request` and reads until the server closes or `limit` passes: (bytes, closed).
async fn exchange(stream: &mut TcpStream, request: &[u8], limit: Duration) -> (String, bool) {
    stream.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match tokio::time::timeout(limit, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes()
}

fn run(f: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f);
}

#[test]
fn a_client_slow_with_its_head_stalls_only_itself_and_is_closed_at_the_header_timeout() {
    run(async {
        let (addr, _, _stop, _) = start();
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /a HTTP/1.1\r\nHo").await.unwrap();
        let mut other = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(&mut other, &get("/b"), Duration::from_secs(5)).await;
        assert!(reply.ends_with("GET /b"), "{reply}");
        let (rest, closed) = exchange(&mut slow, b"s", Duration::from_secs(5)).await;
        assert!(closed, "the slow head is cut off");
        assert!(!rest.contains("GET /a"), "never answered: {rest}");
    });
}

#[test]
fn an_idle_keep_alive_connection_is_closed_at_the_header_timeout() {
    run(async {
        let (addr, _, _stop, _) = start();
        let mut idle = TcpStream::connect(addr).await.unwrap();
        let keep = b"GET /k HTTP/1.1\r\nHost: t\r\n\r\n";
        let (reply, closed) = exchange(&mut idle, keep, Duration::from_secs(5)).await;
        assert!(closed, "closed while idle after its answer");
        assert!(reply.ends_with("GET /k"), "{reply}");
    });
}

#[test]
fn past_the_connection_limit_a_client_is_closed_at_once_and_counted() {
    run(async {
        let (addr, stats, _stop, _) = start();
        let mut held = Vec::new();
        for _ in 0..limits().max_connections {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"G").await.unwrap();
            held.push(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut over = TcpStream::connect(addr).await.unwrap();
        let (reply, closed) = exchange(&mut over, &get("/x"), Duration::from_secs(5)).await;
        assert!(closed && reply.is_empty(), "{reply}");
        assert_eq!(stats.refused.load(Ordering::Relaxed), 1);
        drop(held);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut again = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(&mut again, &get("/y"), Duration::from_secs(5)).await;
        assert!(reply.ends_with("GET /y"), "slots free again: {reply}");
    });
}

#[test]
fn bodies_are_bounded_in_size_and_time_with_json_errors() {
    run(async {
        let (addr, _, _stop, _) = start();
        let post = |len: usize, body: &str| {
            format!(
                "POST /body HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}"
            )
        };
        let mut s = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(&mut s, post(4, "abcd").as_bytes(), Duration::from_secs(5)).await;
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with("abcd"),
            "{reply}"
        );
        let mut s = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(
            &mut s,
            post(100_000, "abc").as_bytes(),
            Duration::from_secs(5),
        )
        .await;
        assert!(
            reply.starts_with("HTTP/1.1 413"),
            "declared too large: {reply}"
        );
        assert!(reply.contains(r#""code":"too_large""#), "{reply}");
        let mut s = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(&mut s, post(6, "ab").as_bytes(), Duration::from_secs(5)).await;
        assert!(
            reply.starts_with("HTTP/1.1 408"),
            "a body that never comes: {reply}"
        );
        assert!(reply.contains(r#""code":"body_timeout""#), "{reply}");
        let chunked = "POST /body HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
        let mut s = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(&mut s, chunked.as_bytes(), Duration::from_secs(5)).await;
        assert!(
            reply.starts_with("HTTP/1.1 413"),
            "undeclared too large: {reply}"
        );
    });
}

#[test]
fn shutdown_stops_accepting_and_lets_a_request_in_flight_finish() {
    run(async {
        let (addr, _, stop, task) = start();
        let mut busy = TcpStream::connect(addr).await.unwrap();
        busy.write_all(&get("/slow")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop.send(true).unwrap();
        let (reply, closed) = exchange(&mut busy, b"", Duration::from_secs(5)).await;
        assert!(reply.ends_with("slow") && closed, "{reply}");
        task.await.unwrap();
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "no longer listening"
        );
    });
}

#[test]
fn a_streamed_body_goes_out_chunked_as_it_is_produced() {
    run(async {
        let (addr, _, _stop, _) = start();
        let mut s = TcpStream::connect(addr).await.unwrap();
        let (reply, _) = exchange(&mut s, &get("/stream"), Duration::from_secs(5)).await;
        assert!(reply.contains("transfer-encoding: chunked"), "{reply}");
        let body = reply.split_once("\r\n\r\n").unwrap().1;
        assert_eq!(
            body,
            "7\r\nline 2\n\r\n7\r\nline 1\n\r\n7\r\nline 0\n\r\n0\r\n\r\n"
        );
    });
}
