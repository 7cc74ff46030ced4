#!/usr/bin/env python3
"""Writes a pcap of bidirectional conversations for flow-monitor benchmarks.

usage: mkflows.py OUT.pcap PACKETS [FLOWS] [CONCURRENT]

PACKETS packets in FLOWS flows (default 100 000; PACKETS/FLOWS packets each), CONCURRENT
(default 5000) of them open at a time, their packets interleaved. 70% TCP conversations (SYN,
SYN-ACK, ACK, data both ways, FIN both ways), 20% UDP request/response, 10% ICMP echo
request/reply. 1 Mpps of packet time. The first address octet varies (see PEERS.md on
tcpdump's address cache).
"""
import struct
import sys

out, n = sys.argv[1], int(sys.argv[2])
flows = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
window = int(sys.argv[4]) if len(sys.argv) > 4 else 5000
per = max(4, n // flows)
window = max(1, min(window, flows))

ETH = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0])


def ipv4(src, dst, proto, l4):
    total = 20 + len(l4)
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, proto, 0, src, dst) + l4


def frame(k, j):
    """Packet j (0..per-1) of flow k: (bytes)."""
    c = bytes([1 + k % 223, (k >> 8) & 255, k & 255, 1])
    s = bytes([198, 18, (k >> 8) & 255, k & 255])
    cport = 1024 + k % 60000
    kind = k % 10
    last = per - 1
    if kind < 7:  # TCP
        if j == 0:
            fr, fl, pay = True, 0x02, 0
        elif j == 1:
            fr, fl, pay = False, 0x12, 0
        elif j == 2:
            fr, fl, pay = True, 0x10, 0
        elif j == last - 1:
            fr, fl, pay = True, 0x11, 0
        elif j == last:
            fr, fl, pay = False, 0x11, 0
        else:
            fr, fl, pay = (j % 2 == 1), 0x18, 40 + (k + j) % 100
        sp, dp = (cport, 80) if fr else (80, cport)
        l4 = struct.pack("!HHIIBBHHH", sp, dp, j, 0, 0x50, fl, 65535, 0, 0) + bytes(pay)
        ip = ipv4(c, s, 6, l4) if fr else ipv4(s, c, 6, l4)
    elif kind < 9:  # UDP
        fr = j % 2 == 0
        sp, dp = (cport, 53) if fr else (53, cport)
        pay = 30 + (k + j) % 60
        l4 = struct.pack("!HHHH", sp, dp, 8 + pay, 0) + bytes(pay)
        ip = ipv4(c, s, 17, l4) if fr else ipv4(s, c, 17, l4)
    else:  # ICMP echo
        fr = j % 2 == 0
        l4 = struct.pack("!BBHHH", 8 if fr else 0, 0, 0, k & 0xFFFF, j) + bytes(32)
        ip = ipv4(c, s, 1, l4) if fr else ipv4(s, c, 1, l4)
    f = ETH + ip
    if len(f) < 60:
        f += bytes(60 - len(f))
    return f


with open(out, "wb", buffering=1 << 22) as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    chunk = []
    i = 0
    base = 0
    while i < n:
        # A wave of `window` flows, each sending `per` packets, interleaved round-robin.
        w = min(window, flows - base) if base < flows else window
        for j in range(per):
            for q in range(w):
                if i >= n:
                    break
                fr = frame(base + q, j)
                chunk.append(struct.pack("<IIII", 1_700_000_000 + i // 1_000_000, i % 1_000_000, len(fr), len(fr)))
                chunk.append(fr)
                i += 1
            if len(chunk) >= 40000:
                f.write(b"".join(chunk))
                chunk.clear()
        base += w
    f.write(b"".join(chunk))
