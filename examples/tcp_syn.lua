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
    local p = pkts[i]
    p:ip4():setSrc(0xc6120000 + math.random(1, 65534))   -- 198.18.x.y
    p:tcp():setSrcPort(math.random(1024, 65535))
    p:tcp():setSeq(math.random(0, 0x7fffffff))
    p:tcp():setFlags(0x02)                               -- SYN
  end
end
