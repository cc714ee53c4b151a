"""The PM/Ethernet packet header (udp device, version 2) for the tests that
build packets by hand: the foreign-datagram tests (pmjob.py) and the fuzzer's
seed corpus (pm/fuzz/seeds.py).  docs/pm/wire.md is the specification and
pm/src/udp/wire.c the implementation; pm/tests/unit/test_wire.c checks the
document's test vectors against the C encoder, and test_pmwire.py checks this
module against the same vectors, so the three cannot drift apart."""

import struct

VERSION = 2
HDR_BYTES = 24
MSG_HDR_BYTES = 32
DATA, ACK, STOP, GO, LOSE, PROBE, PROBE_ACK, POLL = range(1, 9)
F_FIRST, F_LAST, F_ACK = 1, 2, 4
TYPE_BITS = 4           # byte 1: the type below, the flags above
MASK64 = (1 << 64) - 1


def wire_key(jobkey, dst):
    """The key field of a packet to `dst`: the job key with the receiver
    folded in (wire.h, wire_key)."""
    return (jobkey ^ (dst * 0x9E3779B97F4A7C15)) & MASK64


def header(type_, flags, length, jobkey, src, dst, seq, ack, version=VERSION):
    """The 24-byte packet header, little-endian."""
    return struct.pack("<BBHIIIQ", version, type_ | flags << TYPE_BITS, length,
                       src, seq, ack, wire_key(jobkey, dst))


def msg_header(total, kind, key=0, offset=0, cookie=0):
    """The 32-byte message header at the start of a FIRST packet's payload."""
    return struct.pack("<IB3xQQQ", total, kind, key, offset, cookie)
