-- MoonGen's l3-load-latency: Poisson load with latency probes in every packet. Receive on the
-- far side with `linerate count -i PORT --latency --hist-out lat.csv`, or in the same run with
-- `linerate gen -o PORT --rx PORT2 --script examples/l3_load_latency.lua`.
-- Every packet already carries the probe (signature, stream, sequence, send time); the script
-- only spreads the load over destination ports so that a receiver's RSS sees many flows.
config = {
  rate = "500kpps",
  pattern = "poisson",
  size = 124,
  src_ip = "198.18.0.1",
  dst_ip = "198.18.0.2",
}

function modify(pkts, count)
  for i = 1, count do
    pkts[i]:udp():setDstPort(319 + math.random(0, 63))
  end
end
