#!/usr/bin/env python3
"""Writes the seeds of the http2_connection and hpack_decode fuzz targets (run from fuzz/seeds
with the test venv's python: ~/.cache/kudurru/venv/bin/python3 make_http2_seeds.py). Frames are
built with hyperframe and hpack (python-hyper), an implementation independent of kudurru's."""
import base64

from hpack import Encoder
from hyperframe.frame import (ContinuationFrame, DataFrame, GoAwayFrame, HeadersFrame,
                              PingFrame, PriorityFrame, RstStreamFrame, SettingsFrame,
                              WindowUpdateFrame)

QUERY = bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001")
B64 = base64.urlsafe_b64encode(QUERY).rstrip(b"=").decode()
GET = f"/dns-query?dns={B64}"


def headers(stream, path, method="GET", body=None, huffman=True, end=True, enc=None):
    enc = enc or Encoder()
    fields = [(":method", method), (":scheme", "https"), (":authority", "dns.test"),
              (":path", path), ("accept", "application/dns-message")]
    if body is not None:
        fields += [("content-type", "application/dns-message"),
                   ("content-length", str(len(body)))]
    frame = HeadersFrame(stream, enc.encode(fields, huffman=huffman))
    frame.flags.add("END_HEADERS")
    if end and body is None:
        frame.flags.add("END_STREAM")
    return frame.serialize()


def data(stream, body, end=True):
    frame = DataFrame(stream, body)
    if end:
        frame.flags.add("END_STREAM")
    return frame.serialize()


def write(name, control, frames):
    """The target's first byte is its control byte (read sizes, what happens to requests)."""
    with open(f"http2_connection/{name}", "wb") as f:
        f.write(bytes([control]) + b"".join(frames))


def main():
    write("get", 0x00, [headers(1, GET)])
    write("post", 0x00, [headers(1, "/dns-query", "POST", body=QUERY), data(1, QUERY)])
    enc = Encoder()
    write("three-streams-dynamic-table", 0x23,
          [headers(1, GET, enc=enc), headers(3, GET, enc=enc),
           headers(5, "/dns-query", "POST", body=QUERY, enc=enc),
           data(5, QUERY[:10], end=False), data(5, QUERY[10:])])
    # Issue 32 item 7: control-frame floods and a stream ID lower than one already used.
    ack = SettingsFrame(0)
    ack.flags.add("ACK")
    write("window-update-flood", 0x01, [WindowUpdateFrame(0, 1).serialize()] * 300)
    write("settings-ack-flood", 0x01, [ack.serialize()] * 300)
    write("ping-flood", 0x01, [PingFrame(0, b"12345678").serialize()] * 300)
    write("lower-stream-id", 0x02, [headers(5, GET), headers(3, GET)])
    rapid = []
    for stream in range(1, 40, 2):
        rapid += [headers(stream, GET, end=False), RstStreamFrame(stream, 8).serialize()]
    write("rapid-reset", 0x41, rapid)
    first = HeadersFrame(1, Encoder().encode([(":method", "GET"), (":scheme", "https")]))
    rest = ContinuationFrame(1, Encoder().encode([(":path", GET), (":authority", "dns.test")]))
    rest.flags.add("END_HEADERS")
    write("continuation", 0x05, [first.serialize(), rest.serialize(),
                                 PriorityFrame(3, 1, 16).serialize(),
                                 GoAwayFrame(0, 0).serialize()])

    # hpack_decode: blocks separated by 0xff on one decoder (RFC 7541 C.3 without Huffman and
    # C.4 with, each three requests sharing the dynamic table).
    c3 = ["828684410f7777772e6578616d706c652e636f6d", "828684be58086e6f2d6361636865",
          "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"]
    c4 = ["828684418cf1e3c2e5f23a6ba0ab90f4ff", "828684be5886a8eb10649cbf",
          "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"]
    for name, blocks in (("rfc7541-c3", c3), ("rfc7541-c4-huffman", c4)):
        with open(f"hpack_decode/{name}", "wb") as f:
            f.write(b"\xff".join(bytes.fromhex(b) for b in blocks))
    enc = Encoder()
    fields = [(":status", "200"), ("content-type", "application/dns-message"),
              ("cache-control", "max-age=300")]
    with open("hpack_decode/responses-dynamic-table", "wb") as f:
        f.write(b"\xff".join(enc.encode(fields, huffman=h) for h in (True, False, True)))
    # A dynamic table size update to 4096, then a literal with incremental indexing.
    with open("hpack_decode/size-update", "wb") as f:
        f.write(bytes.fromhex("3fe11f400a637573746f6d2d6b65790c637573746f6d2d76616c7565"))


if __name__ == "__main__":
    main()
