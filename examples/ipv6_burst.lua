-- IPv6/UDP in bursts of 16 (burst:N pattern) with the low 32 bits of the destination
-- incremented per packet, and a payload marker written with raw byte access.
-- Run: linerate gen -o PORT --script examples/ipv6_burst.lua -c 100k
config = {
  rate = "100kpps",
  pattern = "burst:16",
  src_ip = "2001:db8::1",
  dst_ip = "2001:db8:1::1",
  size = 128,
}

local n = 0

function modify(pkts, count)
  for i = 1, count do
    local p = pkts[i]
    p:ip6():setDst(1 + n % 4096)
    -- 8 bytes after the 16-byte probe signature: a marker the DUT can match on
    p:setU32(p:payloadOffset() + 16, 0xfeedf00d)
    p:setU32(p:payloadOffset() + 20, n)
    n = n + 1
  end
end
