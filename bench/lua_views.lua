-- bench/lua_views.lua: the packet views (crates/linerate/src/apps/lua/packets.lua) alone, in a
-- standalone LuaJIT, to time a script's per-packet cost and read its traces (-jv, -jdump), which
-- linerate keeps from scripts (jit.util). By hand, never in CI. LuaJIT as linerate links it:
--
--   cp -r ~/.cargo/registry/src/*/luajit-src-*/luajit2 /tmp/lj && make -C /tmp/lj -j2
--   LUA_PATH="/tmp/lj/src/?.lua;;" /tmp/lj/src/luajit [-jv] bench/lua_views.lua SCRIPT FUNC BATCHES [w]
--
-- SCRIPT defines FUNC(pkts, n, q) as gen's modify / balance's balance / fwd's filter; `w` makes
-- the packets writable (gen). 64 UDP frames a batch (TTL 64-66). Environment: PKTS_LUA=FILE
-- loads another packets.lua; PRE=1 parses the packets before the timed call, in the fill (as
-- linerate's Rust side does, parse_slot), instead of in the script's first field; PROF=1 runs
-- LuaJIT's profiler in mode "li20" as linerate does to stop compiled code. Prints the script's
-- ns per packet (the fill, timed alone, taken out).
local ffi = require("ffi")
local script, fname, nb, write = arg[1], arg[2], tonumber(arg[3]), arg[4] == "w"
local path = os.getenv("PKTS_LUA") or "crates/linerate/src/apps/lua/packets.lua"
-- On one line, comments out, as linerate loads it (packet.rs's one_line): LuaJIT's profiler
-- checks once per source line a trace enters, so the lines matter to the figures.
local function one_line(src)
  local out = {}
  for line in (src .. "\n"):gmatch("([^\n]*)\n") do
    local quote, i, cut = nil, 1, #line + 1
    while i <= #line do
      local c = line:sub(i, i)
      if quote then
        if c == "\\" then i = i + 1 elseif c == quote then quote = nil end
      elseif c == '"' or c == "'" then
        quote = c
      elseif c == "-" and line:sub(i + 1, i + 1) == "-" then
        cut = i
        break
      end
      i = i + 1
    end
    local code = line:sub(1, cut - 1):match("^%s*(.-)%s*$")
    if code ~= "" then out[#out + 1] = code end
  end
  return table.concat(out, " ")
end
local chunk = assert(loadstring(one_line(assert(io.open(path)):read("*a")), "=packets"))
local make = chunk(function() return "" end, function() return nil end, function() return nil end)
local ctx = ffi.new("struct lr_ctx")
ctx.w = write and 1 or 0; ctx.dr = write and 0 or 1; ctx.eth = 1; ctx.ck = write and 1 or 0
local frames = ffi.new("uint8_t[64][64]")
local f = { 2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0, 0x45, 0, 0, 50, 0, 1, 0, 0, 64, 17, 0, 0,
  10, 0, 0, 1, 10, 0, 0, 2, 0x04, 0, 0, 53, 0, 30, 0x12, 0x34 }
for i = 0, 63 do
  for j = 1, #f do frames[i][j - 1] = f[j] end
  frames[i][22] = 64 + i % 3
  local sum = 0
  for o = 14, 32, 2 do sum = sum + frames[i][o] * 256 + frames[i][o + 1] end
  while sum > 0xffff do sum = sum % 65536 + math.floor(sum / 65536) end
  sum = 0xffff - sum
  frames[i][24], frames[i][25] = math.floor(sum / 256), sum % 256
end
local pkts, q = make(ffi.cast("void *", ctx), write and "gen" or "balance")
if os.getenv("PROF") then require("jit.profile").start("li20", function() end) end
dofile(script)
local fn, pre = _G[fname], os.getenv("PRE")
local function fill()
  for i = 0, 63 do
    local s = ctx.p[i]
    s.a = ffi.cast("uint64_t", ffi.cast("uintptr_t", frames[i])); s.n = 64; s.st = 0
    s.drop = 0; s.dirty = 0; s.g = 0
    s.h[0], s.h[1], s.h[2], s.h[3] = nil, nil, nil, nil
    s.ok = 1; ctx.q[i] = -1
  end
  ctx.n = 64
  if pre then for i = 1, 64 do local _ = pkts[i].ip4 end end
end
local t0 = os.clock()
for _ = 1, nb do fill() end
local tf = os.clock() - t0
t0 = os.clock()
for _ = 1, nb do fill(); fn(pkts, 64, q) end
local t = os.clock() - t0
print(string.format("%s: %.1f ns/packet in the script (the fill: %.1f)", script,
  (t - tf) * 1e9 / (nb * 64), tf * 1e9 / (nb * 64)))
