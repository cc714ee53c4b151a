"""NetPIPE's np.out, read the same way by every suite (scripts/bench's
pm-shm, scripts/bench_mpi.py).

np.out has a row per message size: bytes, "Mbps" and the time in seconds (in
ping-pong the round trip / 2, in stream mode the receiver's time per
message; NetPIPE keeps the best of its trials). NetPIPE 3.7 prints the
time with 8 decimals, i.e. rounded to 10 ns, a step of 2 to 10 % at the
latencies on one node, and "Mbps" with 6, computed from the same time
before the rounding as bits / (time x 2^20). So the time is taken from
"Mbps"; a row whose two columns disagree by more than the rounding of the
printed time is refused, in case another NetPIPE defines "Mbps" otherwise.
"""

MBPS_UNIT = 2 ** 20     # NetPIPE's "Mbps": bits / s / 2^20
PRINTED_STEP = 1e-8     # the printed time's last decimal, in seconds


class NetpipeError(Exception):
    pass


def seconds(size, mbps, printed):
    """The time of a row of `size` bytes, from its "Mbps" column."""
    if mbps <= 0 or printed <= 0:
        raise NetpipeError(f"np.out: {size} bytes: Mbps {mbps}, time {printed}")
    t = size * 8 / (mbps * MBPS_UNIT)
    if abs(t - printed) > PRINTED_STEP / 2 + 1e-6 * printed:
        raise NetpipeError(f"np.out: {size} bytes: {mbps} Mbps gives {t:.10f} s, "
                           f"the row says {printed} s")
    return t


def rows(text):
    """[{"bytes", "seconds", "np_mbps", "np_seconds"}] of an np.out's text,
    np_seconds being the time as printed."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        size, mbps, printed = int(parts[0]), float(parts[1]), float(parts[2])
        out.append({"bytes": size, "seconds": seconds(size, mbps, printed),
                    "np_mbps": mbps, "np_seconds": printed})
    return out
