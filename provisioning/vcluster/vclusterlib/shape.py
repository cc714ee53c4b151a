"""The shape of a cluster: node count, NIC count, link rate and MTU.

Two `up` requests describe the same cluster if their shapes are equal; that is
what makes `up` idempotent.  An omitted rate means "unlimited" and an omitted
MTU means the Ethernet default, 1500, so `--mtu 1500` and no `--mtu` are the
same shape.
"""

import re
from dataclasses import dataclass
from typing import Optional

from .errors import VclusterError
from .naming import MAX_NICS, MAX_NODES

DEFAULT_MTU = 1500
# 1280 is the IPv6 minimum (the veths carry IPv6 link-local addresses); 65535
# is the largest MTU of veth and bridge devices.
MIN_MTU, MAX_MTU = 1280, 65535
MIN_RATE, MAX_RATE = 8_000, 400_000_000_000  # 8 kbit/s .. 400 Gbit/s

_PREFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
           "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_RATE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(|k|m|g|t|ki|mi|gi|ti)(bit|bps)\Z")
RATE_HELP = ("a number with a tc unit: bit, kbit, mbit, gbit, tbit (bits/s), "
             "bps, kbps, mbps, gbps (bytes/s), or kibit, mibit, ... (powers of 2)")


def parse_rate(text):
    """Bits per second for a tc-style rate such as '1gbit' or '12.5mbps'."""
    m = _RATE_RE.match(text.strip().lower())
    if not m:
        raise VclusterError(f"bad rate {text!r}: expected {RATE_HELP}; e.g. 100mbit, 1gbit")
    value = float(m.group(1)) * _PREFIX[m.group(2)] * (8 if m.group(3) == "bps" else 1)
    bits = int(round(value))
    if not MIN_RATE <= bits <= MAX_RATE:
        raise VclusterError(f"bad rate {text!r}: must lie between 8kbit and 400gbit")
    return bits


def format_rate(bits):
    """Shortest exact decimal tc spelling of a rate: 1000000000 -> '1gbit'."""
    if bits is None:
        return "unlimited"
    for unit, factor in (("tbit", 10**12), ("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bits % factor == 0:
            return f"{bits // factor}{unit}"
    return f"{bits}bit"


@dataclass(frozen=True)
class Shape:
    nodes: int
    nics: int = 1
    rate: Optional[int] = None      # bits per second, None = unlimited
    mtu: int = DEFAULT_MTU

    def validate(self):
        if not 1 <= self.nodes <= MAX_NODES:
            raise VclusterError(f"--nodes must be between 1 and {MAX_NODES}, not {self.nodes}")
        if not 1 <= self.nics <= MAX_NICS:
            raise VclusterError(f"--nics must be between 1 and {MAX_NICS}, not {self.nics}")
        if not MIN_MTU <= self.mtu <= MAX_MTU:
            raise VclusterError(f"--mtu must be between {MIN_MTU} and {MAX_MTU}, not {self.mtu}")
        return self

    def describe(self):
        nodes = f"{self.nodes} node{'s' if self.nodes != 1 else ''}"
        nics = f"{self.nics} NIC{'s' if self.nics != 1 else ''}"
        return f"{nodes} × {nics} (rate {format_rate(self.rate)}, MTU {self.mtu})"

    def to_dict(self):
        return {"nodes": self.nodes, "nics": self.nics, "rate_bps": self.rate,
                "rate": format_rate(self.rate), "mtu": self.mtu}

    @classmethod
    def from_dict(cls, d):
        return cls(nodes=int(d["nodes"]), nics=int(d["nics"]),
                   rate=None if d.get("rate_bps") is None else int(d["rate_bps"]),
                   mtu=int(d.get("mtu") or DEFAULT_MTU))
