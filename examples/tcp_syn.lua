-- SYN packets from random sources with random sequence numbers (a SYN flood test for a DUT).
-- Run: linerate gen -o PORT --script examples/tcp_syn.lua -c 1M
config = {
  proto = "tcp",
  dport = 80,
  size = 64,
  dst_ip = "198.18.0.2",
}

function modify(pkts, count)
  for i = 1, count do
    -- fields by name (docs/lua.md); p:tcp():setSeq(...) is the same, MoonGen's way
    local p = pkts[i]
    p.ip4.src = 0xc6120000 + math.random(1, 65534)   -- 198.18.x.y
    local tcp = p.tcp
    tcp.sport = math.random(1024, 65535)
    tcp.seq = math.random(0, 0x7fffffff)
    tcp.flags = 0x02                                 -- SYN
  end
end
