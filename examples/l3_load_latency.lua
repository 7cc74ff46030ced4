-- MoonGen's examples/l3-load-latency.lua, ported: UDP load from 10.0.0.10 to 10.1.0.10 at
-- 1999 Mbit/s (MoonGen: rate - 1 of its 2000 Mbit/s default), 124-byte frames (128 with the
-- CRC linerate's --size counts), source port 1234 + a counter wrapping over 4 flows, destination
-- port 1234; latency measured on the receiving port, histogram saved as CSV.
--
--   MoonGen:  MoonGen examples/l3-load-latency.lua TX RX [RATE [FLOWS [SIZE]]]
--   linerate: linerate gen -o afpacket:TX --rx afpacket:RX --dst-mac MAC \
--               --script examples/l3_load_latency.lua --hist-out histogram.csv -t 60s
--             [--rate RATEMbps] [--sport 1234-(1234+FLOWS-1)] [--size SIZE+4]
--
-- The knobs are the command's flags: they override this config table (docs/lua.md, "Coming
-- from MoonGen", says what differs: no ARP, software timestamps in every packet).
config = {
  rate = "1999Mbps",     -- MoonGen's setRate(rate - 1), rate in Mbit/s
  pattern = "cbr",       -- MoonGen's hardware rate limiter: constant bit rate
  size = 128,            -- bufs:alloc(124): 124 bytes without the CRC
  src_ip = "10.0.0.10",  -- SRC_IP
  dst_ip = "10.1.0.10",  -- DST_IP
  sport = "1234-1237",   -- SRC_PORT + counter, counter = incAndWrap(counter, flows = 4)
  dport = "1234",        -- DST_PORT
  proto = "udp",
}

-- MoonGen's load task sets the source port per packet in Lua; here the generator does it
-- itself (--sport A-B increments and wraps, per packet, as incAndWrap does), which is cheaper
-- than a Lua call per packet. modify() is where a script changes what the flags cannot say:
-- MoonGen's offloadUdpChecksums() is implicit (linerate fills in the checksums).
function modify(pkts, count)
end
