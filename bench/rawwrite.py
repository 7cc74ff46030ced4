#!/usr/bin/env python3
"""bench/rawwrite.py DIR RECORDS RECSIZE CHUNK: the kernel's part of writing a capture, alone.

Writes RECORDS*RECSIZE bytes in CHUNK-byte write() calls from one reused buffer into a new file
in DIR (then removes it) and prints the seconds: only the kernel's copy into the page cache and
its page work are timed. E.g. 10 M records of 80 B (pcap, 64 B frames) against 96 B (pcapng's
enhanced packet blocks) into /dev/shm with 1 MiB writes:

    python3 bench/rawwrite.py /dev/shm/x 10000000 80 1048576
"""
import os
import sys
import time

d, n, rs, ch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
total = n * rs
buf = memoryview(bytearray(os.urandom(ch)))
p = os.path.join(d, f"rawwrite-{os.getpid()}.out")
fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
t = time.perf_counter()
left = total
while left > 0:
    k = min(ch, left)
    left -= os.write(fd, buf[:k])
os.close(fd)
e = time.perf_counter() - t
os.unlink(p)
print(f"{e:.3f}")
