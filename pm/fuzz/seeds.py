#!/usr/bin/python3
"""Write a seed corpus for fuzz_udp_rx: well-formed conversations the fuzzer
then mutates.  Usage: seeds.py DIR"""
import os
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "pm"))
import pmwire  # noqa: E402  (the packet header's one Python view)

JOBKEY = 0x0123456789ABCDEF
DATA, ACK, STOP, GO, LOSE, PROBE, PROBE_ACK, POLL = range(1, 9)
FIRST, LAST, F_ACK = 1, 2, 4
MSG, WRITE, READ_REQ, READ_RESP, RMA_DONE, ATOMIC = range(6)
REGION_KEY = (2 << 16) | 5


def header(ptype, flags, payload, src=1, dst=0, seq=0, ack=0):
    return pmwire.header(ptype, flags, len(payload), JOBKEY, src, dst, seq, ack) + payload


msg_header = pmwire.msg_header


def record(pkt, src=1, take=True):
    return struct.pack("<BBH", src, 1 if take else 0, len(pkt)) + pkt


def message(body, seq, kind=MSG, key=0, offset=0, src=1, frag=200):
    """Packets of one message starting at seq; returns (records, next seq)."""
    out, first = [], True
    pos = 0
    chunks = []
    room = frag - pmwire.MSG_HDR_BYTES
    while True:
        n = min(room, len(body) - pos)
        chunks.append(body[pos:pos + n])
        pos += n
        room = frag
        if pos >= len(body):
            break
    for i, chunk in enumerate(chunks):
        flags = (FIRST if i == 0 else 0) | (LAST if i == len(chunks) - 1 else 0) | F_ACK
        payload = (msg_header(len(body), kind, key, offset, 0x10001) if i == 0 else b"") + chunk
        out.append(record(header(DATA, flags, payload, src=src, seq=seq + i), src=src))
    return out, seq + len(chunks)


def main():
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    seeds = {}
    recs, seq = message(b"hello", 1)
    seeds["one-message"] = recs
    recs, seq = message(bytes(range(256)) * 3, 1)
    more, _ = message(b"x" * 10, seq)
    seeds["fragments"] = recs + more
    recs, _ = message(bytes(100), 1, kind=WRITE, key=REGION_KEY, offset=64)
    seeds["write"] = recs
    recs, _ = message(struct.pack("<Q", 128), 1, kind=READ_REQ, key=REGION_KEY, offset=0)
    seeds["read"] = recs
    recs, _ = message(struct.pack("<IIQQ", 3, 0, 5, 0), 1, kind=ATOMIC, key=REGION_KEY, offset=8)
    seeds["atomic"] = recs
    recs, _ = message(b"a" * 50, 1)
    seeds["reordered"] = list(reversed(recs)) + recs
    seeds["control"] = [record(header(t, F_ACK, b"", seq=3, ack=0)) for t in (ACK, STOP, GO, LOSE)] + \
        [record(header(PROBE, 0, b"", seq=1)), record(header(PROBE_ACK, 0, b"", seq=1)),
         record(header(POLL, 0, b"", seq=1))]
    big = []
    seq = 1
    for _ in range(40):
        recs, seq = message(bytes(4000), seq)
        big += [r[:1] + b"\x00" + r[2:] for r in recs]   # never released: STOP
    seeds["flow-control"] = big
    for name, recs in seeds.items():
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(b"".join(recs))


if __name__ == "__main__":
    main()
