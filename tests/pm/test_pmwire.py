"""The tests' Python view of the PM packet header (pmwire.py) encodes the
test vectors of docs/pm/wire.md exactly as the C encoder does
(pm/tests/unit/test_wire.c checks the same lines): a packet a test builds by
hand is one the receiver would accept, but for what the test changes on
purpose."""

import re
import struct

from conftest import REPO_ROOT

from . import pmwire as w

JOBKEY = 0x0123456789ABCDEF


def doc_vectors():
    text = (REPO_ROOT / "docs" / "pm" / "wire.md").read_text()
    return {m[1]: bytes.fromhex(m[2].replace(" ", ""))
            for m in re.finditer(r"^    ([a-z-]+): ([0-9a-f ]+)$", text, re.M)}


def test_the_python_header_encodes_the_documented_vectors():
    atomic_body = struct.pack("<IIQQ", 3, 0, 2, 0)
    built = {
        "data": w.header(w.DATA, 7, 32 + 5, JOBKEY, 1, 0, 7, 3) + w.msg_header(5, 0),
        "ack": w.header(w.ACK, w.F_ACK, 0, JOBKEY, 0, 1, 0, 41),
        "stop": w.header(w.STOP, w.F_ACK, 0, JOBKEY, 0, 1, 0x100, 0xFF),
        "lose": w.header(w.LOSE, w.F_ACK, 0, JOBKEY, 0, 1, 0xFFFFFFFE, 0xFFFFFFFE),
        "write": w.header(w.DATA, w.F_FIRST | w.F_ACK, 32 + 1000, JOBKEY, 2, 3, 9, 0)
        + w.msg_header(4096, 1, 0x20005, 128, 0x10001),
        "atomic": w.header(w.DATA, 7, 32 + 24, JOBKEY, 1, 0, 12, 4)
        + w.msg_header(24, 5, 0x28005, 0x5D5000000040, 0x30002) + atomic_body,
        "atomic-done": w.header(w.DATA, 7, 32, JOBKEY, 0, 1, 5, 12)
        + w.msg_header(0, 4, 1, 0, 0x30002),
    }
    documented = doc_vectors()
    assert set(built) <= set(documented), f"wire.md lacks {set(built) - set(documented)}"
    for name, packet in built.items():
        assert packet == documented[name], (
            f"{name}: pmwire builds {packet.hex()}, wire.md says {documented[name].hex()}")
    assert len(w.header(w.ACK, 0, 0, JOBKEY, 0, 1, 0, 0)) == w.HDR_BYTES
