#!/usr/bin/env python3
"""Writes examples/sample.pcap: 2'000 frames of mixed traffic (the embedded default capture).

Ethernet with IPv4 and IPv6, UDP, TCP (handshakes, data, FIN), ICMP echo, 802.1Q-tagged frames,
ARP; 40 flows with rotating addresses; 1 ms apart. Deterministic: same bytes every run.
"""
import struct, sys

def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def eth(dst, src, etype, payload, vlan=None):
    h = bytes(dst) + bytes(src)
    if vlan is not None:
        h += struct.pack("!HH", 0x8100, vlan)
    return h + struct.pack("!H", etype) + payload

def ipv4(src, dst, proto, payload, ident):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0x4000, 64, proto, 0,
                    bytes(src), bytes(dst))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload

def l4_csum_v4(src, dst, proto, seg):
    ph = bytes(src) + bytes(dst) + struct.pack("!BBH", 0, proto, len(seg))
    return csum(ph + seg)

def udp4(src, dst, sp, dp, data):
    u = struct.pack("!HHHH", sp, dp, 8 + len(data), 0) + data
    c = l4_csum_v4(src, dst, 17, u) or 0xffff
    return u[:6] + struct.pack("!H", c) + u[8:]

def tcp4(src, dst, sp, dp, seq, ack, flags, data):
    t = struct.pack("!HHIIBBHHH", sp, dp, seq, ack, 5 << 4, flags, 65535, 0, 0) + data
    c = l4_csum_v4(src, dst, 6, t)
    return t[:16] + struct.pack("!H", c) + t[18:]

def ipv6_udp(src, dst, sp, dp, data):
    u = struct.pack("!HHHH", sp, dp, 8 + len(data), 0) + data
    ph = bytes(src) + bytes(dst) + struct.pack("!IxxxB", len(u), 17)
    c = csum(ph + u) or 0xffff
    u = u[:6] + struct.pack("!H", c) + u[8:]
    return struct.pack("!IHBB", 0x60000000, len(u), 17, 64) + bytes(src) + bytes(dst) + u

MAC_A = [0x02, 0, 0, 0, 0, 1]
MAC_B = [0x02, 0, 0, 0, 0, 2]

def frames():
    n = 0
    while True:
        f = n % 40
        a = [10 + f % 7, 0, f, 1]
        b = [192, 0, 2, 1 + f]
        kind = n % 10
        if kind in (0, 1, 2):
            yield eth(MAC_B, MAC_A, 0x0800, ipv4(a, b, 17, udp4(a, b, 1024 + f, 4000, b"q" * (18 + f)), n & 0xffff))
        elif kind in (3, 4):
            yield eth(MAC_A, MAC_B, 0x0800, ipv4(b, a, 17, udp4(b, a, 4000, 1024 + f, b"r" * (40 + f)), n & 0xffff))
        elif kind == 5:
            flags = [0x02, 0x12, 0x10, 0x18, 0x11][(n // 10) % 5]
            src, dst = (a, b) if flags != 0x12 else (b, a)
            sp, dp = (40000 + f, 80) if flags != 0x12 else (80, 40000 + f)
            data = b"GET / HTTP/1.1\r\n\r\n" if flags == 0x18 else b""
            yield eth(MAC_B, MAC_A, 0x0800, ipv4(src, dst, 6, tcp4(src, dst, sp, dp, 1000 + n, 2000, flags, data), n & 0xffff))
        elif kind == 6:
            icmp = struct.pack("!BBHHH", 8, 0, 0, f, n & 0xffff) + b"ping" * 8
            icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
            yield eth(MAC_B, MAC_A, 0x0800, ipv4(a, b, 1, icmp, n & 0xffff))
        elif kind == 7:
            s6 = bytes([0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [f + 1])
            d6 = bytes([0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [0xfe])
            yield eth(MAC_B, MAC_A, 0x86dd, ipv6_udp(s6, d6, 5000 + f, 4739, b"v6" * 20))
        elif kind == 8:
            yield eth(MAC_B, MAC_A, 0x0800, ipv4(a, b, 17, udp4(a, b, 2000 + f, 9, b"\0" * 18), n & 0xffff), vlan=100 + f % 3)
        else:
            arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + bytes(MAC_A) + bytes(a) + bytes(6) + bytes(b)
            yield eth([0xff] * 6, MAC_A, 0x0806, arp + bytes(18))
        n += 1

def main(path, count=2000):
    t0 = 1_700_000_000
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        for i, fr in zip(range(count), frames()):
            if len(fr) < 60:
                fr += bytes(60 - len(fr))
            out.write(struct.pack("<IIII", t0 + i // 1000, (i % 1000) * 1000, len(fr), len(fr)))
            out.write(fr)

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/sample.pcap")
