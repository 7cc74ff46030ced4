-- MoonGen's quality-of-service-test: two kinds of traffic told apart by port and DSCP.
-- Run with two streams (each gets half the rate and its own latency statistics):
--   linerate gen -o PORT --streams 2 --script examples/qos_streams.lua --rx PORT2
-- pkt:stream() is the stream's index (0-based) in the generating thread.
config = {
  rate = "200kpps",
  size = 128,
}

function modify(pkts, count)
  for i = 1, count do
    local p = pkts[i]
    if p:stream() == 0 then
      p:udp():setDstPort(42)          -- background
      p:setByte(15, 0x00)             -- IPv4 TOS (offset 14 + 1): best effort
    else
      p:udp():setDstPort(43)          -- foreground
      p:setByte(15, 46 * 4)           -- DSCP EF
    end
  end
end
