-- MoonGen's examples/quality-of-service-test.lua, ported: two UDP flows into a device under
-- test, background to port 42 at 1500 Mbit/s and foreground to port 43 at 100 Mbit/s, 124-byte
-- frames (128 with the CRC linerate's --size counts), source addresses random in
-- 10.0.0.1-10.0.0.255, source port 1234, to 192.168.1.1 at MAC 10:11:12:13:14:15; latency
-- measured per class on the receiving port.
--
--   MoonGen:  MoonGen examples/quality-of-service-test.lua TX RX [RATE [BGRATE]]
--   linerate: linerate gen -o afpacket:TX --rx afpacket:RX --streams 16 \
--               --script examples/qos_streams.lua -t 60s
--
-- linerate shares the rate equally between a thread's streams: with --streams 16, stream 0
-- (foreground, port 43) gets 1/16 of 1600 Mbit/s = 100 Mbit/s and streams 1-15 (background,
-- port 42) 1500 Mbit/s, MoonGen's defaults; other ratios: --streams N gives 1/N to the
-- foreground. --rx reports latency per stream (stream 0 is MoonGen's "Foreground traffic").
config = {
  rate = "1600Mbps",               -- rate + bgRate, MoonGen's setRate in Mbit/s on two queues
  pattern = "cbr",
  size = 128,                      -- PKT_SIZE = 124, without the CRC
  src_ip = "random:10.0.0.1-10.0.0.255", -- pkt.ip.src:set(baseIP + math.random() * 255)
  dst_ip = "192.168.1.1",
  dst_mac = "10:11:12:13:14:15",
  sport = "1234",
  dport = "42",                    -- the background's port; the foreground's is set below
  proto = "udp",
}

local FOREGROUND = 43

function modify(pkts, count)
  for i = 1, count do
    local p = pkts[i]
    if p:stream() == 0 then
      p.udp.dport = FOREGROUND     -- MoonGen: udpDst = port in the foreground queue's mempool
    end
  end
end
