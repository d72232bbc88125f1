//! DNS over TCP framing (RFC 1035 §4.2.2, RFC 7766 §8): a two-byte length, then the message.
//!
//! [`FrameBuffer`] is the sans-IO half of a stream reader: the shell reads into
//! [`FrameBuffer::spare`], reports how much arrived with [`FrameBuffer::filled`], and takes
//! complete messages out with [`FrameBuffer::next_frame`], whatever the segment boundaries.
//! Pipelined queries arrive many per read; a frame longer than the buffer grows it (to at most
//! 2 + 65535 bytes).

/// Initial buffer size: many pipelined queries fit in one read.
pub const INITIAL: usize = 16 * 1024;

/// Bytes read from a stream, cut into messages.
#[derive(Debug)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for FrameBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameBuffer {
    /// An empty buffer of [`INITIAL`] bytes.
    pub fn new() -> Self {
        Self {
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
        }
    }

    /// The next complete message, if one is buffered.
    pub fn next_frame(&mut self) -> Option<Vec<u8>> {
        let available = &self.buf[self.start..self.end];
        let len = usize::from(u16::from_be_bytes([
            *available.first()?,
            *available.get(1)?,
        ]));
        let message = available.get(2..2 + len)?.to_vec();
        self.start += 2 + len;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Some(message)
    }

    /// Where the next read goes: never empty. Makes room first by moving a partial frame to the
    /// front, and grows the buffer when the pending frame is longer than it.
    pub fn spare(&mut self) -> &mut [u8] {
        let pending = self.end - self.start;
        let needed = match self.buf.get(self.start..self.start + 2) {
            Some(len) if pending >= 2 => 2 + usize::from(u16::from_be_bytes([len[0], len[1]])),
            _ => 2,
        };
        if self.end == self.buf.len() || needed > self.buf.len() - self.start {
            self.buf.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = pending;
            if needed > self.buf.len() {
                self.buf.resize(needed, 0);
            }
        }
        if self.end == self.buf.len() {
            // Only when a complete frame is still buffered (the caller did not drain it).
            self.buf.resize(self.buf.len() + INITIAL, 0);
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` bytes were read into [`Self::spare`].
    pub fn filled(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// Bytes buffered but not yet returned as a message.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(buffer: &mut FrameBuffer, mut bytes: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let spare = buffer.spare();
            let n = spare.len().min(chunk).min(bytes.len());
            spare[..n].copy_from_slice(&bytes[..n]);
            buffer.filled(n);
            bytes = &bytes[n..];
            while let Some(frame) = buffer.next_frame() {
                frames.push(frame);
            }
        }
        frames
    }

    fn framed(messages: &[Vec<u8>]) -> Vec<u8> {
        messages
            .iter()
            .flat_map(|m| {
                let mut f = (m.len() as u16).to_be_bytes().to_vec();
                f.extend_from_slice(m);
                f
            })
            .collect()
    }

    #[test]
    fn any_split_yields_the_same_messages() {
        let messages: Vec<Vec<u8>> = (0..50u8)
            .map(|i| vec![i; usize::from(i) * 7 % 300])
            .chain([vec![9; 40_000], vec![], vec![1; 65_535]])
            .collect();
        let bytes = framed(&messages);
        for chunk in [1, 2, 3, 511, 4096, 16 * 1024, 100_000] {
            let mut buffer = FrameBuffer::new();
            assert_eq!(feed(&mut buffer, &bytes, chunk), messages, "chunk {chunk}");
            assert_eq!(buffer.pending(), 0);
        }
    }

    #[test]
    fn a_partial_frame_waits_for_the_rest() {
        let mut buffer = FrameBuffer::new();
        assert!(feed(&mut buffer, &[0, 3, 1, 2], 10).is_empty());
        assert_eq!(buffer.pending(), 4);
        assert_eq!(feed(&mut buffer, &[3, 0], 10), vec![vec![1, 2, 3]]);
        assert_eq!(buffer.pending(), 1, "the next frame's first length byte");
    }
}
