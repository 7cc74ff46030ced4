#!/usr/bin/env python3
"""Prints the interface statistics blocks (ISB) of a pcapng file, one line per block, with the
interface they describe: what Wireshark 4.0's capinfos and tshark do not show (capinfos only
counts an interface's "stat entries"; tshark -V shows packets, not statistics blocks).

    python3 scripts/pcapng-isb.py FILE.pcapng

Each line: interface id, if_name, snaplen, start and end (UTC), isb_ifrecv, isb_ifdrop,
isb_filteraccept, isb_osdrop, isb_usrdeliv and the comment, as JSON.
"""
import datetime
import json
import struct
import sys

SHB, IDB, ISB = 0x0A0D0D0A, 1, 5
ISB_OPTS = {2: "start", 3: "end", 4: "ifrecv", 5: "ifdrop", 6: "filteraccept", 7: "osdrop",
            8: "usrdeliv"}


def options(body, at, end):
    """(code, value) of the options in body[at:end]."""
    while at + 4 <= end:
        code, n = struct.unpack_from(E + "HH", body, at)
        if code == 0:
            return
        yield code, body[at + 4:at + 4 + n]
        at += 4 + (n + 3) // 4 * 4


def utc(ticks, per_s):
    s, frac = divmod(ticks, per_s)
    t = datetime.datetime.fromtimestamp(s, datetime.timezone.utc)
    digits = len(str(per_s)) - 1
    return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{frac:0{digits}d}" if digits else "")


def main(path):
    global E
    data = open(path, "rb").read()
    at, E, ifaces = 0, "<", []
    while at + 12 <= len(data):
        btype = struct.unpack_from("<I", data, at)[0]
        if btype == SHB:
            E = "<" if data[at + 8:at + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            ifaces = []
        length = struct.unpack_from(E + "I", data, at + 4)[0]
        if length < 12 or at + length > len(data):
            sys.exit(f"{path}: block at offset {at}: bad length {length}")
        body = data[at + 8:at + length - 4]
        if btype == IDB:
            _, _, snaplen = struct.unpack_from(E + "HHI", body, 0)
            name, per_s = "", 10**6
            for code, v in options(body, 8, len(body)):
                if code == 2:
                    name = v.split(b"\0")[0].decode("utf-8", "replace")
                elif code == 9 and v:
                    r = v[0]
                    per_s = 2 ** (r & 0x7F) if r & 0x80 else 10 ** r
            ifaces.append((name, snaplen, per_s))
        elif btype == ISB:
            iid = struct.unpack_from(E + "I", body, 0)[0]
            name, snaplen, per_s = ifaces[iid] if iid < len(ifaces) else ("", 0, 10**6)
            out = {"interface": iid, "if_name": name, "snaplen": snaplen}
            for code, v in options(body, 12, len(body)):
                if code in (2, 3):
                    hi, lo = struct.unpack_from(E + "II", v, 0)
                    out[ISB_OPTS[code]] = utc(hi << 32 | lo, per_s)
                elif code in ISB_OPTS:
                    out[ISB_OPTS[code]] = struct.unpack_from(E + "Q", v, 0)[0]
                elif code == 1:
                    out["comment"] = v.decode("utf-8", "replace")
            print(json.dumps(out))
        at += length


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
