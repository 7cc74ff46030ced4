-- UDP load over many flows (MoonGen's l3-load-latency load task, pktgen's "range" mode).
-- Run: linerate gen -o afpacket:veth0 --script examples/udp_flows.lua -t 10s
-- Every packet gets a source address out of 256 and a source port out of 1000: 256'000 flows.
-- Flags given on the command line override the config table.
config = {
  rate = "1Mpps",
  size = 64,
  dst_mac = "02:00:00:00:00:02",
  dst_ip = "198.18.0.2",
  dport = 9,
}

local FLOWS = 256
local PORTS = 1000
local n = 0

function modify(pkts, count)
  for i = 1, count do
    local p = pkts[i]
    p.ip4.src = 0xc6120000 + 10 + (n % FLOWS)  -- 198.18.0.10 .. 198.18.1.9 (docs/lua.md)
    p.udp.sport = 1024 + (n % PORTS)           -- or MoonGen's p:udp():setSrcPort(...)
    n = n + 1
  end
end
