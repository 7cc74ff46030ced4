#!/usr/bin/env python3
"""Writes a large pcap of 64-byte Ethernet/IPv4/UDP frames for read benchmarks.

usage: mkpcap.py OUT.pcap PACKETS [FLOWS]
Addresses rotate over FLOWS flows (first octet varies too, see PEERS.md on tcpdump's cache).
"""
import struct, sys

out, n = sys.argv[1], int(sys.argv[2])
flows = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
base = bytearray(
    bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0])
    + struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, 0, 64, 17, 0, bytes(4), bytes(4))
    + struct.pack("!HHHH", 1024, 9, 26, 0)
    + bytes(18)
)
assert len(base) == 60
with open(out, "wb", buffering=1 << 22) as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    chunk = []
    for i in range(n):
        k = i % flows
        base[26:30] = bytes([1 + k % 223, (k >> 8) & 255, k & 255, 1])
        base[30:34] = bytes([198, 18, (k >> 8) & 255, k & 255])
        base[34:36] = struct.pack("!H", 1024 + (k % 50000))
        chunk.append(struct.pack("<IIII", 1_700_000_000 + i // 1_000_000, i % 1_000_000, 60, 60))
        chunk.append(bytes(base))
        if len(chunk) >= 20000:
            f.write(b"".join(chunk))
            chunk.clear()
    f.write(b"".join(chunk))
