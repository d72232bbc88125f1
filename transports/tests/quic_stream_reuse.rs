//! The patched quinn-proto (transports/vendor/quinn-proto.patch) gives a new stream the send
//! state of a finished one (its box, segment queue and acknowledged-range set) instead of
//! allocating them again. Whatever a finished stream left in that state must not reach the
//! next one: its offsets, its FIN, a reset, a peer's STOP_SENDING.
//!
//! One connection carries hundreds of streams in waves, each answer a different length, some
//! streams reset by the server and some stopped by the client; every other stream must still be
//! answered with exactly its own bytes. A reused state that kept an offset, a reset or a stop
//! shows as a wrong or missing answer, or a stream error.

mod support;

use kudurru_transports::quic::client_endpoint;

/// Streams per wave (opened at once) and waves; the server's concurrent-stream limit is above
/// a wave, so every wave runs concurrently.
const WAVE: usize = 24;
const WAVES: usize = 12;
/// The error code of the server's resets, and of the client's STOP_SENDING.
const RESET: u32 = 7;
const STOP: u32 = 9;

/// What stream `i` asks for: a reset for every 5th, for the others an answer of a length that
/// varies from stream to stream (so a kept offset cannot go unnoticed).
fn query(i: usize) -> Vec<u8> {
    if i % 5 == 3 {
        b"reset".to_vec()
    } else {
        format!("{i}:{}", 1 + (i * 37) % 1500).into_bytes()
    }
}

/// The answer to `query`: its text repeated to the length it names.
fn answer(query: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(query);
    let len: usize = text
        .split(':')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    query.iter().copied().cycle().take(len).collect()
}

/// The server: reads each stream to its end, then resets it or writes the answer and finishes.
async fn serve(endpoint: quinn::Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        glommio::spawn_local(async move {
            let Ok(connection) = incoming.await else {
                return;
            };
            while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                glommio::spawn_local(async move {
                    let Ok(query) = recv.read_to_end(64).await else {
                        return;
                    };
                    if query == b"reset" {
                        let _ = send.reset(quinn::VarInt::from_u32(RESET));
                        return;
                    }
                    // A stream the client stopped fails here; the stream is then reset.
                    if send.write_all(&answer(&query)).await.is_ok() {
                        let _ = send.finish();
                    }
                })
                .detach();
            }
        })
        .detach();
    }
}

/// Stream `i` of the client: its query, then what the server did, checked.
async fn exchange(connection: quinn::Connection, i: usize) -> Result<(), String> {
    let (mut send, mut recv) = connection
        .open_bi()
        .await
        .map_err(|e| format!("stream {i}: {e}"))?;
    let query = query(i);
    send.write_all(&query)
        .await
        .map_err(|e| format!("stream {i}: {e}"))?;
    send.finish().map_err(|e| format!("stream {i}: {e}"))?;
    if i % 5 == 1 {
        // Stopped before reading: the server's write fails and its state ends reset.
        recv.stop(quinn::VarInt::from_u32(STOP))
            .map_err(|e| format!("stream {i}: {e}"))?;
        return Ok(());
    }
    let read = recv.read_to_end(4096).await;
    match (query.as_slice(), read) {
        (b"reset", Err(quinn::ReadToEndError::Read(quinn::ReadError::Reset(code))))
            if code == quinn::VarInt::from_u32(RESET) =>
        {
            Ok(())
        }
        (b"reset", other) => Err(format!("stream {i}: asked for a reset, got {other:?}")),
        (_, Ok(got)) if got == answer(&query) => Ok(()),
        (_, Ok(got)) => Err(format!(
            "stream {i}: answered {} bytes, not its own {}",
            got.len(),
            answer(&query).len()
        )),
        (_, Err(e)) => Err(format!("stream {i}: {e}")),
    }
}

#[test]
fn streams_on_reused_send_state_carry_only_their_own_data() {
    let outcome = support::executor(|| async {
        let mut transport = quinn::TransportConfig::default();
        transport.max_concurrent_bidi_streams(quinn::VarInt::from_u32(2 * WAVE as u32));
        let (server_config, client_config) = support::quic_configs(transport)?;
        let (server, server_addr) = support::quic_server(server_config)?;
        glommio::spawn_local(serve(server)).detach();

        let client = client_endpoint("127.0.0.1:0".parse().unwrap()).map_err(|e| e.to_string())?;
        let connection = client
            .connect_with(client_config, server_addr, "localhost")
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;

        for wave in 0..WAVES {
            let streams: Vec<_> = (0..WAVE)
                .map(|k| {
                    let connection = connection.clone();
                    glommio::spawn_local(exchange(connection, wave * WAVE + k))
                })
                .collect();
            for stream in streams {
                stream.await?;
            }
        }
        // The connection survived every reset and stop.
        if let Some(reason) = connection.close_reason() {
            return Err(format!("the connection ended: {reason}"));
        }
        Ok(())
    })
    .join()
    .expect("executor thread");
    outcome.expect("test body");
}
