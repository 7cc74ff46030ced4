-- linerate's packet views (docs/lua.md), loaded into every script's state before the script.
--
-- The packets a script gets are views of the frames themselves: Rust fills, once per batch, a
-- C array of `struct lr_pkt` (address and length of each frame, its stream, flags) that the
-- library owns, and these functions read and write the frames through LuaJIT's FFI, so that
-- `p.udp.dport = 53` compiles to a few loads and stores. Every access is checked against the
-- frame's length; a missing layer is nil (a field of a layer the packet no longer has is an
-- error). The FFI library itself stays here, in upvalues: scripts do not get it.

local ffi = require("ffi")
local bit = require("bit")
local band, bor, bxor, bnot, rshift, lshift = bit.band, bit.bor, bit.bxor, bit.bnot, bit.rshift, bit.lshift
local bswap, tobit = bit.bswap, bit.tobit
local cast, copy, fstring, istype = ffi.cast, ffi.copy, ffi.string, ffi.istype
local type, error, tostring, format, min = type, error, tostring, string.format, math.min
local setmetatable, rawget = setmetatable, rawget

-- Scripts do not reach the FFI (raw pointers), nor load C code.
package.loaded.ffi = nil
package.preload.ffi = nil
_G.ffi = nil
package.loadlib = nil
package.cpath = ""
if package.loaders then
  package.loaders[4] = nil
  package.loaders[3] = nil
end

ffi.cdef([[
struct lr_pkt {
  uint64_t a; uint32_t n; uint16_t st;
  uint8_t drop, dirty, ok, g, ver, proto, nvl, l4ok;
  uint16_t l3, l4, l3e, pay;
  uint8_t *h[4];
};
struct lr_ctx { uint32_t n; uint8_t w, dr, eth, ck; struct lr_pkt p[64]; int16_t q[64]; };
struct lr_ip4; struct lr_udp; struct lr_tcp; struct lr_icmp;
struct lr_ip4_ro; struct lr_udp_ro; struct lr_tcp_ro; struct lr_icmp_ro;
]])
-- h[0..3]: where this batch's parse found the IPv4, UDP, TCP and ICMP headers (NULL: not
-- there, or not parsed yet). A layer view (p.ip4, p.udp, ...) is a pointer to its anchor h[k]
-- of the slot, typed by layer: an incomplete struct, so the script can neither index it by
-- number nor do arithmetic on it, only the named fields of its metatype.
assert(ffi.sizeof("struct lr_pkt") == 64 and ffi.sizeof("struct lr_ctx") == 8 + 64 * 64 + 128)
local HOFF = ffi.offsetof("struct lr_pkt", "h")
local u8p = ffi.typeof("uint8_t *")
local u8pp = ffi.typeof("uint8_t **")
local u16p = ffi.typeof("uint16_t *")
local i32p = ffi.typeof("int32_t *")
local slotp = ffi.typeof("struct lr_pkt *")

local text_addr, parse_addr, parse_mac = ... -- Rust: address text <-> bytes (the slow forms)

local C -- struct lr_ctx *, set by make()
local P -- C.p
local TOOL = "?"

local function fail(msg)
  error(msg, 0) -- linerate places it at the script's line (from the traceback)
end

local function bad_index(i)
  if type(i) == "number" and i >= 0 and i < 64 then
    fail(format("pkts[%d] is not part of this batch of %d", i + 1, C.n))
  end
  fail("not a packet of this batch")
end

-- The slot of view `v` (its index is v[1]); checked: a script may have changed v[1].
local SLOT = {} -- SLOT[i + 1] = P + i, made once (no cdata made per access)
local function slot(v)
  local i = v[1]
  local s = type(i) == "number" and SLOT[i + 1]
  if not s or s.ok == 0 then bad_index(i) end
  return s
end

local VLAN = { [0x8100] = true, [0x88a8] = true, [0x9100] = true }
local EXT = { [0] = true, [43] = true, [44] = true, [60] = true, [51] = true, [135] = true,
  [139] = true, [140] = true }

local function be16(b, o) return bor(lshift(b[o], 8), b[o + 1]) end

local function transport(s, b, at, stop, pr)
  s.proto = pr
  s.l4 = at
  local room = stop - at
  local hl
  if pr == 6 then
    if room < 20 then return end
    hl = rshift(b[at + 12], 4) * 4
    if hl < 20 or room < hl then return end
  elseif pr == 17 or pr == 1 or pr == 58 then
    hl = 8
  elseif pr == 132 then
    hl = 12
  else
    return
  end
  if room < hl then return end
  s.l4ok = 1
  s.pay = at + hl
  local h = s.h
  if pr == 17 then
    h[1] = b + at
  elseif pr == 6 then
    h[2] = b + at
  elseif pr ~= 132 then
    h[3] = b + at
  end
end

-- The tags after the source MAC (cold: called only when there is one).
local function tags(b, n, et)
  local off, k = 14, 0
  while VLAN[et] do
    if k == 4 or off + 4 > n then return nil end
    et = be16(b, off + 2)
    off = off + 4
    k = k + 1
  end
  return et, off, k
end

-- IPv4's AH headers (cold): the protocol after them and where it starts (nil: truncated).
local function skip_ah(b, n, at, stop)
  local pr = 51
  for _ = 1, 4 do
    if pr ~= 51 then break end
    if at + 2 > n then return nil end
    pr, at = b[at], at + (b[at + 1] + 2) * 4
    if at > stop then return nil end
  end
  return pr, at
end

-- linerate's parser (wire::parse) in Lua: VLAN/QinQ tags, IPv4 (AH stepped over), IPv6
-- extension headers, later fragments without transport header.
local function parse(s)
  s.g, s.ver, s.proto, s.nvl, s.l4ok, s.l3, s.l4, s.l3e, s.pay = 1, 0, 0, 0, 0, 0, 0, 0, 0
  local h = s.h
  h[0], h[1], h[2], h[3] = nil, nil, nil, nil
  local b, n = cast(u8p, s.a), s.n
  local off, want = 0, nil
  if C.eth ~= 0 then
    if n < 14 then return end
    local et, k = be16(b, 12), 0
    off = 14
    if VLAN[et] then
      et, off, k = tags(b, n, et)
      if not et then return end
    end
    s.nvl = k
    if et == 0x0800 then want = 4 elseif et == 0x86dd then want = 6 else return end
  end
  if off >= n then return end
  local v = rshift(b[off], 4)
  if want and v ~= want then return end
  if v == 4 then
    local hl = band(b[off], 15) * 4
    if hl < 20 or off + hl > n then return end
    local total = be16(b, off + 2)
    if total < hl then return end
    local stop = min(off + total, n)
    s.ver, s.l3, s.l3e = 4, off, stop
    h[0] = b + off
    local pr = b[off + 9]
    s.proto = pr
    if band(be16(b, off + 6), 0x1fff) ~= 0 then return end -- a later fragment
    local at = off + hl
    if pr == 51 then
      pr, at = skip_ah(b, n, at, stop)
      if not pr then return end
    end
    transport(s, b, at, stop, pr)
  elseif v == 6 then
    if off + 40 > n then return end
    local pl = be16(b, off + 4)
    local stop = pl == 0 and n or min(off + 40 + pl, n)
    s.ver, s.l3, s.l3e = 6, off, stop
    local nh, at, steps = b[off + 6], off + 40, 0
    while true do
      s.proto = nh
      if nh == 59 then return end
      if not EXT[nh] then break end
      if steps == 8 or at + 2 > stop then return end
      steps = steps + 1
      local nx, ln = b[at], b[at + 1]
      local hlen = (nh == 44 and 8) or (nh == 51 and (ln + 2) * 4) or (ln + 1) * 8
      if at + hlen > stop then return end
      if nh == 44 and band(be16(b, at + 2), 0xfff8) ~= 0 then
        s.proto = nx -- a later fragment: its protocol, no transport header
        return
      end
      nh, at = nx, at + hlen
    end
    transport(s, b, at, stop, nh)
  end
end

-- Raw bytes, big-endian; `o` already checked.
local function rd(b, o, size)
  if size == 1 then return b[o] end
  if size == 2 then return bor(lshift(b[o], 8), b[o + 1]) end
  return b[o] * 16777216 + bor(lshift(b[o + 1], 16), lshift(b[o + 2], 8), b[o + 3])
end
local function wr(b, o, size, x)
  if size == 1 then b[o] = x return end
  if size == 2 then b[o], b[o + 1] = rshift(x, 8), x return end
  -- band: a number from 2^31 stored straight into a uint8_t is not its low byte (the FFI's
  -- double -> integer conversion saturates it); the bit operations take it modulo 2^32.
  b[o], b[o + 1], b[o + 2], b[o + 3] = rshift(x, 24), rshift(x, 16), rshift(x, 8), band(x, 255)
end

-- Raw bytes written may move headers: the views find them again (parse) at their next field.
local function unparse(s)
  s.g = 0
  local h = s.h
  h[0], h[1], h[2], h[3] = nil, nil, nil, nil
end

local function writable(s, what)
  if C.w == 0 then fail(what .. ": packets are read-only in " .. TOOL .. " scripts") end
  s.dirty = 1
end

-- Layers: where each starts in slot `s` (nil when the packet does not have it).
local ETH, VL, IP4, IP6, UDP, TCP, ICMP = 1, 2, 3, 4, 5, 6, 7
local LNAME = { "eth", "vlan", "ip4", "ip6", "udp", "tcp", "icmp" }
local FIELDS = {
  "src, dst, type, smac, dmac",
  "id, pcp, tpid",
  "src, dst, saddr, daddr, ttl (hlim), proto (next), tos (tc), len, id, version",
  "src, dst, ttl (hlim), next, proto, tos (tc), flow, len, version",
  "sport, dport, len, checksum",
  "sport, dport, seq, ack, flags, win, checksum",
  "type, code, checksum",
}

local function base(s, l)
  if s.g == 0 then parse(s) end
  if l == ETH then
    if C.eth ~= 0 and s.n >= 14 then return 0 end
  elseif l == VL then
    if s.nvl > 0 then return 12 end
  elseif l == IP4 then
    if s.ver == 4 then return s.l3 end
  elseif l == IP6 then
    if s.ver == 6 then return s.l3 end
  elseif s.l4ok ~= 0 then
    local pr = s.proto
    if (l == UDP and pr == 17) or (l == TCP and pr == 6) or (l == ICMP and (pr == 1 or pr == 58)) then
      return s.l4
    end
  end
  return nil
end

local function at(v, l, key)
  local s = slot(v)
  local o = base(s, l)
  if not o then
    fail(format("pkt.%s.%s: pkts[%d] has no %s header", LNAME[l], key, v[1] + 1, LNAME[l]))
  end
  return s, cast(u8p, s.a), o
end

local function check_int(x, max, what)
  if type(x) ~= "number" or not (x >= 0 and x <= max) or x % 1 ~= 0 then
    fail(format("%s: a number from 0 to %d", what, max))
  end
  return x
end

-- Field makers: get(v) and set(v, x) for a layer `l`.
local function num(l, key, off, size, shift, mask)
  local what = "pkt." .. LNAME[l] .. "." .. key
  local full = shift == 0 and (mask == 0xff and size == 1 or mask == 0xffff and size == 2
    or mask == 0xffffffff and size == 4)
  local get, set
  if full then
    get = function(v)
      local _, b, o = at(v, l, key)
      return rd(b, o + off, size)
    end
    set = function(v, x)
      local s, b, o = at(v, l, key)
      check_int(x, mask, what)
      writable(s, what)
      wr(b, o + off, size, x)
    end
  else
    get = function(v)
      local _, b, o = at(v, l, key)
      return band(rshift(rd(b, o + off, size), shift), mask)
    end
    set = function(v, x)
      local s, b, o = at(v, l, key)
      check_int(x, mask, what)
      writable(s, what)
      local old = rd(b, o + off, size)
      wr(b, o + off, size, bor(band(old, bnot(lshift(mask, shift))), lshift(x, shift)))
    end
  end
  return get, set
end

local function readonly(l, key, f)
  local what = "pkt." .. LNAME[l] .. "." .. key
  return function(v)
    local s = at(v, l, key)
    return f(s)
  end, function() fail(what .. " is read-only") end
end

local function mac(l, key, off)
  local what = "pkt." .. LNAME[l] .. "." .. key
  return function(v)
    local _, b, o = at(v, l, key)
    o = o + off
    return format("%02x:%02x:%02x:%02x:%02x:%02x", b[o], b[o + 1], b[o + 2], b[o + 3], b[o + 4], b[o + 5])
  end, function(v, x)
    local s, b, o = at(v, l, key)
    o = o + off
    if type(x) == "string" then
      local m, e = parse_mac(x)
      if not m then fail(what .. ": " .. e) end
      writable(s, what)
      copy(b + o, m, 6)
    elseif type(x) == "number" and x >= 0 and x < 2 ^ 48 and x % 1 == 0 then
      writable(s, what)
      local hi = (x - x % 2 ^ 32) / 2 ^ 32
      wr(b, o, 2, hi)
      wr(b, o + 2, 4, x % 2 ^ 32)
    else
      fail(what .. ": a MAC address is a string (aa:bb:cc:dd:ee:ff) or an integer below 2^48")
    end
  end
end

-- A MAC as an integer (the fast form).
local function macnum(l, key, off)
  local what = "pkt." .. LNAME[l] .. "." .. key
  return function(v)
    local _, b, o = at(v, l, key)
    return rd(b, o + off, 2) * 2 ^ 32 + rd(b, o + off + 2, 4)
  end, function(v, x)
    local s, b, o = at(v, l, key)
    if type(x) ~= "number" or not (x >= 0 and x < 2 ^ 48) or x % 1 ~= 0 then
      fail(what .. ": an integer below 2^48")
    end
    writable(s, what)
    wr(b, o + off, 2, (x - x % 2 ^ 32) / 2 ^ 32)
    wr(b, o + off + 2, 4, x % 2 ^ 32)
  end
end

local function addr(l, key, off, v6)
  local what = "pkt." .. LNAME[l] .. "." .. key
  local n = v6 and 16 or 4
  return function(v)
    local _, b, o = at(v, l, key)
    o = o + off
    if not v6 then return format("%d.%d.%d.%d", b[o], b[o + 1], b[o + 2], b[o + 3]) end
    return text_addr(fstring(b + o, 16))
  end, function(v, x)
    local s, b, o = at(v, l, key)
    o = o + off
    if type(x) == "number" then
      if not (x >= 0 and x <= 0xffffffff) or x % 1 ~= 0 then
        fail(what .. ": an address is a string or an integer from 0 to 2^32-1")
      end
      writable(s, what)
      wr(b, v6 and o + 12 or o, 4, x)
    elseif type(x) == "string" then
      local a = parse_addr(x, v6)
      if not a then
        fail(format("%s: '%s' is not an %s address", what, x, v6 and "IPv6" or "IPv4"))
      end
      writable(s, what)
      copy(b + o, a, n)
    else
      fail(what .. ": an address is a string or an integer from 0 to 2^32-1")
    end
  end
end

-- GET[l][key], SET[l][key]
local GET, SET = {}, {}
for l = 1, 7 do GET[l], SET[l] = {}, {} end
local function def(l, key, g, s) GET[l][key], SET[l][key] = g, s end

def(ETH, "dst", mac(ETH, "dst", 0))
def(ETH, "src", mac(ETH, "src", 6))
def(ETH, "dmac", macnum(ETH, "dmac", 0))
def(ETH, "smac", macnum(ETH, "smac", 6))
do
  -- the ethertype after the VLAN tags
  local what = "pkt.eth.type"
  def(ETH, "type", function(v)
    local s, b = at(v, ETH, "type")
    local o = 12 + 4 * s.nvl
    if o + 2 > s.n then fail(format("%s: offset %d+2 is past the end of a %d B packet", what, o, s.n)) end
    return rd(b, o, 2)
  end, function(v, x)
    local s, b = at(v, ETH, "type")
    local o = 12 + 4 * s.nvl
    check_int(x, 0xffff, what)
    if o + 2 > s.n then fail(format("%s: offset %d+2 is past the end of a %d B packet", what, o, s.n)) end
    writable(s, what)
    wr(b, o, 2, x)
    unparse(s)
  end)
end
def(VL, "tpid", num(VL, "tpid", 0, 2, 0, 0xffff))
def(VL, "id", num(VL, "id", 2, 2, 0, 0xfff))
def(VL, "pcp", num(VL, "pcp", 2, 2, 13, 7))

def(IP6, "src", addr(IP6, "src", 8, true))
def(IP6, "dst", addr(IP6, "dst", 24, true))
def(IP6, "hlim", num(IP6, "hlim", 7, 1, 0, 0xff))
GET[IP6].ttl, SET[IP6].ttl = GET[IP6].hlim, SET[IP6].hlim
def(IP6, "next", num(IP6, "next", 6, 1, 0, 0xff))
def(IP6, "proto", readonly(IP6, "proto", function(s) return s.proto end))
def(IP6, "tc", num(IP6, "tc", 0, 4, 20, 0xff))
GET[IP6].tos, SET[IP6].tos = GET[IP6].tc, SET[IP6].tc
def(IP6, "flow", num(IP6, "flow", 0, 4, 0, 0xfffff))
def(IP6, "len", num(IP6, "len", 4, 2, 0, 0xffff))
def(IP6, "version", readonly(IP6, "version", function() return 6 end))


-- The fast layers (ip4, udp, tcp, icmp): LuaJIT FFI metatypes over the slot's anchor h[k].
-- Taking the layer (p.ip4) checks the slot and parses the packet once; a field is then a load
-- of the anchor (NULL when the view outlived its batch or a raw write made the packet parse
-- again: `refind` finds the header again or names what is wrong), the value's check (one
-- compare) and the bytes, big-endian (bit.bswap). The header is whole inside the frame: the
-- parser set the anchor only then.
local FK = { [IP4] = 0, [UDP] = 1, [TCP] = 2, [ICMP] = 3 }

local function refind(h, l, key)
  local k = FK[l]
  local s = cast(slotp, cast(u8p, h) - (HOFF + 8 * k))
  local i = tonumber(s - P)
  if s.ok == 0 then
    fail(format("pkt.%s.%s: pkts[%d] is not part of this batch of %d (a view lives for the call it was given in)",
      LNAME[l], key, i + 1, C.n))
  end
  if s.g == 0 then parse(s) end
  local b = s.h[k]
  if b == nil then
    fail(format("pkt.%s.%s: pkts[%d] has no %s header", LNAME[l], key, i + 1, LNAME[l]))
  end
  return b
end

local function range(what, max)
  fail(format("%s: a number from 0 to %d", what, max))
end

-- Checksums kept right as the fields are written (gen; RFC 1624's incremental update): a
-- write of 16-bit words m -> m' makes a checksum HC into ~(~HC + ~m + m'). One's complement sums
-- do not depend on the byte order, so the words are taken as they lie in memory. A checksum
-- `cp` (uint16_t *) takes the change `d`, the sum of ~m + m' over the words written; `udp`: a
-- UDP checksum 0 (none sent) stays 0, and a computed 0 is sent as 0xffff.
local function adjust(cp, d, udp)
  local c = cp[0]
  if udp and c == 0 then return end
  local x = bxor(c, 0xffff) + d
  x = band(x, 0xffff) + rshift(x, 16)
  x = band(x, 0xffff) + rshift(x, 16)
  x = bxor(x, 0xffff)
  if udp and x == 0 then x = 0xffff end
  cp[0] = x
end

-- What a write of a fast layer's field does to the checksums: fix(h, b, d), `h` the view, `b`
-- the header, `d` the change of its words. The IPv4 header's fields its header checksum; the
-- addresses also the UDP or TCP checksum (pseudo-header) when this packet has that header (not
-- a later fragment); the ports, TCP's fields and ICMP's theirs. Fields that change where the
-- headers end (ip4.len, ip4.proto, udp.len) and the checksums themselves mark the packet for
-- the full recompute after modify() instead, as raw writes do.
local function ck_ip4(_, b, d) adjust(cast(u16p, b + 10), d, false) end
local function ck_ip4_addr(h, b, d)
  adjust(cast(u16p, b + 10), d, false)
  local hp = cast(u8pp, h)
  local u = hp[1]
  if u ~= nil then
    adjust(cast(u16p, u + 6), d, true)
  else
    local t = hp[2]
    if t ~= nil then adjust(cast(u16p, t + 16), d, false) end
  end
end
local function ck_udp(_, b, d) adjust(cast(u16p, b + 6), d, true) end
local function ck_tcp(_, b, d) adjust(cast(u16p, b + 16), d, false) end
local function ck_icmp(_, b, d) adjust(cast(u16p, b + 2), d, false) end
local CK = { [IP4] = ck_ip4, [UDP] = ck_udp, [TCP] = ck_tcp, [ICMP] = ck_icmp }

-- get(h) and set(h, x) of an unsigned big-endian field of `size` bytes at `off`, its low bits
-- `mask` (the rest of the bytes kept on a write); `fix` (default: the layer's) keeps the
-- checksums right, "full" marks the packet for the full recompute.
local function fnum(l, key, off, size, mask, fix)
  local what = "pkt." .. LNAME[l] .. "." .. key
  local k = FK[l]
  local full = fix == "full"
  fix = fix or CK[l]
  local function mark(h)
    cast(slotp, cast(u8p, h) - (HOFF + 8 * k)).dirty = 1
  end
  local get, set
  if size == 1 then
    local wo = off - off % 2 -- the 16-bit word of the checksum the byte is part of
    local lo = wo == off -- the byte is the word's first in memory (its low byte as loaded)
    get = function(h)
      local b = cast(u8pp, h)[0]
      if b == nil then b = refind(h, l, key) end
      return b[off]
    end
    set = function(h, x)
      if type(x) ~= "number" or band(x, mask) ~= x then range(what, mask) end
      local b = cast(u8pp, h)[0]
      if b == nil then b = refind(h, l, key) end
      if full then
        b[off] = x
        return mark(h)
      end
      -- the word's new value computed, not loaded again: LuaJIT's compiled code may take a
      -- load of another type than the store as not aliasing it (and reuse the old value)
      local m = cast(u16p, b + wo)[0]
      b[off] = x
      if C.ck ~= 0 then
        local n = lo and bor(band(m, 0xff00), x) or bor(band(m, 0xff), lshift(x, 8))
        fix(h, b, bxor(m, 0xffff) + n)
      end
    end
  elseif size == 2 then
    get = function(h)
      local b = cast(u8pp, h)[0]
      if b == nil then b = refind(h, l, key) end
      return band(rshift(bswap(cast(u16p, b + off)[0]), 16), mask)
    end
    if mask == 0xffff then
      set = function(h, x)
        if type(x) ~= "number" or band(x, 0xffff) ~= x then range(what, mask) end
        local b = cast(u8pp, h)[0]
        if b == nil then b = refind(h, l, key) end
        local p = cast(u16p, b + off)
        local m, n = p[0], rshift(bswap(x), 16)
        p[0] = n
        if full then return mark(h) end
        if C.ck ~= 0 then fix(h, b, bxor(m, 0xffff) + n) end
      end
    else
      set = function(h, x)
        if type(x) ~= "number" or band(x, mask) ~= x then range(what, mask) end
        local b = cast(u8pp, h)[0]
        if b == nil then b = refind(h, l, key) end
        local p = cast(u16p, b + off)
        local m = p[0]
        local old = rshift(bswap(m), 16)
        local n = rshift(bswap(bor(band(old, bnot(mask)), x)), 16)
        p[0] = n
        if full then return mark(h) end
        if C.ck ~= 0 then fix(h, b, bxor(m, 0xffff) + n) end
      end
    end
  else
    -- 32 bits: tobit(x) % 2^32 is x only for a whole x from 0 to 2^32-1
    get = function(h)
      local b = cast(u8pp, h)[0]
      if b == nil then b = refind(h, l, key) end
      return bswap(cast(i32p, b + off)[0]) % 4294967296
    end
    set = function(h, x)
      if type(x) ~= "number" or tobit(x) % 4294967296 ~= x then range(what, 0xffffffff) end
      local b = cast(u8pp, h)[0]
      if b == nil then b = refind(h, l, key) end
      local p = cast(u16p, b + off)
      local m0, m1 = p[0], p[1]
      local y = bswap(x)
      cast(i32p, p)[0] = y
      if full then return mark(h) end
      if C.ck ~= 0 then
        fix(h, b, bxor(m0, 0xffff) + bxor(m1, 0xffff) + band(y, 0xffff) + rshift(y, 16))
      end
    end
  end
  return get, set
end

-- An IPv4 address: read as text, written as text or an integer.
local function faddr(key, off)
  local what = "pkt.ip4." .. key
  local gn, sn = fnum(IP4, key, off, 4, 0xffffffff, ck_ip4_addr)
  return function(h)
    local x = gn(h)
    return format("%d.%d.%d.%d", rshift(x, 24), band(rshift(x, 16), 255), band(rshift(x, 8), 255), band(x, 255))
  end, function(h, x)
    if type(x) == "number" then
      if tobit(x) % 4294967296 ~= x then
        fail(what .. ": an address is a string or an integer from 0 to 2^32-1")
      end
      return sn(h, x)
    elseif type(x) == "string" then
      local a = parse_addr(x, false)
      if not a then fail(format("%s: '%s' is not an IPv4 address", what, x)) end
      local c1, c2, c3, c4 = a:byte(1, 4)
      return sn(h, ((c1 * 256 + c2) * 256 + c3) * 256 + c4)
    else
      fail(what .. ": an address is a string or an integer from 0 to 2^32-1")
    end
  end
end

local FG, FS = {}, {} -- FG[l][key], FS[l][key]
for l in pairs(FK) do FG[l], FS[l] = {}, {} end
local function fdef(l, key, g, s) FG[l][key], FS[l][key] = g, s end
fdef(IP4, "src", faddr("src", 12))
fdef(IP4, "dst", faddr("dst", 16))
fdef(IP4, "saddr", fnum(IP4, "saddr", 12, 4, 0xffffffff, ck_ip4_addr))
fdef(IP4, "daddr", fnum(IP4, "daddr", 16, 4, 0xffffffff, ck_ip4_addr))
fdef(IP4, "ttl", fnum(IP4, "ttl", 8, 1, 0xff))
fdef(IP4, "proto", fnum(IP4, "proto", 9, 1, 0xff, "full"))
fdef(IP4, "tos", fnum(IP4, "tos", 1, 1, 0xff))
fdef(IP4, "len", fnum(IP4, "len", 2, 2, 0xffff, "full"))
fdef(IP4, "id", fnum(IP4, "id", 4, 2, 0xffff))
fdef(IP4, "version", function() return 4 end, function() fail("pkt.ip4.version is read-only") end)
FG[IP4].hlim, FS[IP4].hlim = FG[IP4].ttl, FS[IP4].ttl
FG[IP4].next, FS[IP4].next = FG[IP4].proto, FS[IP4].proto
FG[IP4].tc, FS[IP4].tc = FG[IP4].tos, FS[IP4].tos
for _, l in ipairs({ UDP, TCP }) do
  fdef(l, "sport", fnum(l, "sport", 0, 2, 0xffff))
  fdef(l, "dport", fnum(l, "dport", 2, 2, 0xffff))
end
fdef(UDP, "len", fnum(UDP, "len", 4, 2, 0xffff, "full"))
fdef(UDP, "checksum", fnum(UDP, "checksum", 6, 2, 0xffff, "full"))
fdef(TCP, "seq", fnum(TCP, "seq", 4, 4, 0xffffffff))
fdef(TCP, "ack", fnum(TCP, "ack", 8, 4, 0xffffffff))
fdef(TCP, "flags", fnum(TCP, "flags", 12, 2, 0x1ff))
fdef(TCP, "win", fnum(TCP, "win", 14, 2, 0xffff))
fdef(TCP, "checksum", fnum(TCP, "checksum", 16, 2, 0xffff, "full"))
fdef(ICMP, "type", fnum(ICMP, "type", 0, 1, 0xff))
fdef(ICMP, "code", fnum(ICMP, "code", 1, 1, 0xff))
fdef(ICMP, "checksum", fnum(ICMP, "checksum", 2, 2, 0xffff, "full"))

-- Two metatypes per fast layer: the writable one (gen) and the read-only one (balance, fwd),
-- whose setters are errors naming the tool: no flag is tested per field.
local FT = {} -- FT[l] = { writable ctype, read-only ctype }
local CTN = { [IP4] = "ip4", [UDP] = "udp", [TCP] = "tcp", [ICMP] = "icmp" }
for l in pairs(FK) do
  local name = LNAME[l]
  local function nofield(k)
    fail(format("pkt.%s.%s: no such field (pkt.%s has %s)", name, tostring(k), name, FIELDS[l]))
  end
  local function tostr(h)
    local s = cast(slotp, cast(u8p, h) - (HOFF + 8 * FK[l]))
    return format("pkts[%d].%s", tonumber(s - P) + 1, name)
  end
  local pair = {}
  for ro = 0, 1 do
    local g, st = FG[l], FS[l]
    if ro == 1 then
      st = {}
      for key in pairs(FS[l]) do
        local what = "pkt." .. name .. "." .. key
        st[key] = function() fail(what .. ": packets are read-only in " .. TOOL .. " scripts") end
      end
      st.version = FS[l].version
    end
    -- Methods are plain functions a script can call with anything: each checks that it got
    -- a view of its own layer (a number or another layer's view would be an address).
    local ct = "struct lr_" .. CTN[l] .. (ro == 1 and "_ro" or "")
    local pt = ffi.typeof(ct .. " *")
    local m = {}
    local function method(mname, f)
      local what = "pkt." .. name .. ":" .. mname
      m[mname] = function(h, x)
        if not istype(pt, h) then
          fail(format("%s: call it on the layer (pkt:%s():%s(...))", what, name, mname))
        end
        return f(h, x)
      end
    end
    local function both(mname, key)
      if g[key] then
        method("get" .. mname, g[key])
        method("set" .. mname, st[key])
      end
    end
    both("Src", "src")
    both("Dst", "dst")
    both("SrcPort", "sport")
    both("DstPort", "dport")
    both("TTL", "ttl")
    both("Seq", "seq")
    both("Flags", "flags")
    both("Type", "type")
    both("Id", "id")
    if l == IP4 then
      method("getSrcNum", g.saddr)
      method("getDstNum", g.daddr)
      method("setSrcNum", st.saddr)
      method("setDstNum", st.daddr)
    end
    ffi.metatype(ct, {
      __index = function(h, k)
        local f = g[k]
        if f then return f(h) end
        local mm = m[k]
        if mm then return mm end
        nofield(k)
      end,
      __newindex = function(h, k, x)
        local f = st[k]
        if f then return f(h, x) end
        nofield(k)
      end,
      __call = function(h) return h end,
      __tostring = tostr,
    })
    pair[ro + 1] = pt
  end
  FT[l] = pair
end

-- MoonGen's layer methods: pkt:udp():setSrcPort(1000) is pkt.udp.sport = 1000.
local METH = {}
for l = 1, 7 do
  local m, g, s = {}, GET[l], SET[l]
  local function both(name, key)
    if g[key] then
      local gf, sf = g[key], s[key]
      m["get" .. name] = function(v) return gf(v) end
      m["set" .. name] = function(v, x) sf(v, x) end
    end
  end
  both("Src", "src")
  both("Dst", "dst")
  both("SrcPort", "sport")
  both("DstPort", "dport")
  both("TTL", "ttl")
  both("Seq", "seq")
  both("Flags", "flags")
  both("Type", "type")
  both("Id", "id")
  METH[l] = m
end
METH[ETH].getSrcNum = GET[ETH].smac
METH[ETH].getDstNum = GET[ETH].dmac

local LMT = {}
for l = 1, 7 do
  local g, s, m = GET[l], SET[l], METH[l]
  local name = LNAME[l]
  LMT[l] = {
    __index = function(v, k)
      local f = g[k]
      if f then return f(v) end
      local mm = m[k]
      if mm then return mm end
      fail(format("pkt.%s.%s: no such field (pkt.%s has %s)", name, tostring(k), name, FIELDS[l]))
    end,
    __newindex = function(v, k, x)
      local f = s[k]
      if f then return f(v, x) end
      fail(format("pkt.%s.%s: no such field (pkt.%s has %s)", name, tostring(k), name, FIELDS[l]))
    end,
    __call = function(v) return v end,
    __tostring = function(v) return format("pkts[%s].%s", tostring(v[1] + 1), name) end,
    __metatable = false,
  }
end

-- The views of each slot: VIEW[l][i + 1] for layer l of slot i.
local VIEW = {}
for l = 1, 7 do
  local t = {}
  for i = 0, 63 do t[i + 1] = setmetatable({ i }, LMT[l]) end
  VIEW[l] = t
end

local LAYER = { eth = ETH, vlan = VL, ip4 = IP4, ip6 = IP6, udp = UDP, tcp = TCP, icmp = ICMP }

local function raw_at(s, off, size, what)
  if type(off) ~= "number" or off % 1 ~= 0 then
    fail(what .. ": the offset is a whole number (from 0), not " .. tostring(off))
  end
  if not (off >= 0 and off + size <= s.n) then
    fail(format("%s: offset %s+%d is past the end of a %d B packet", what, tostring(off), size, s.n))
  end
  return cast(u8p, s.a)
end

local PM = {} -- methods of a packet
PM.len = function(p) return slot(p).n end
PM.stream = function(p) return slot(p).st end
for name, size in pairs({ getByte = 1, getU16 = 2, getU32 = 4 }) do
  PM[name] = function(p, off)
    local s = slot(p)
    local b = raw_at(s, off, size, name)
    return rd(b, off, size)
  end
end
for name, size in pairs({ setByte = 1, setU16 = 2, setU32 = 4 }) do
  local max = 2 ^ (8 * size) - 1
  PM[name] = function(p, off, x)
    local s = slot(p)
    if type(x) ~= "number" or not (x >= 0 and x <= max) or x % 1 ~= 0 then
      fail(format("%s(%s, %s): the value does not fit in %d byte(s)", name, tostring(off), tostring(x), size))
    end
    local b = raw_at(s, off, size, name)
    writable(s, name)
    wr(b, off, size, x)
    unparse(s) -- raw bytes may move headers: parse again at the next field
  end
end
PM.bytes = function(p, off, len)
  local s = slot(p)
  if type(len) ~= "number" or not (len >= 0) or len % 1 ~= 0 then
    fail("bytes: the length is a whole number from 0, not " .. tostring(len))
  end
  local b = raw_at(s, off, len, "bytes")
  return fstring(b + off, len)
end
PM.data = function(p)
  local s = slot(p)
  return fstring(cast(u8p, s.a), s.n)
end
PM.drop = function(p)
  local s = slot(p)
  if C.dr == 0 then fail("drop(): " .. TOOL .. " scripts do not drop packets") end
  s.drop = 1
end
PM.dropped = function(p) return slot(p).drop ~= 0 end
PM.payloadOffset = function(p)
  local s = slot(p)
  if s.g == 0 then parse(s) end
  if s.l4ok == 0 or not (s.proto == 6 or s.proto == 17) then
    fail("payloadOffset: the packet has no UDP or TCP header")
  end
  return s.pay
end
PM.raw = function(p) return p end

-- ANCHOR[l][i + 1]: the view of fast layer l of slot i (made once, in make()).
local ANCHOR = {}

local PMT = {
  __index = function(p, k)
    local l = LAYER[k]
    if l then
      local i = p[1]
      local s = type(i) == "number" and SLOT[i + 1]
      if not s or s.ok == 0 then bad_index(i) end
      local fk = FK[l]
      if fk then
        if s.g == 0 then parse(s) end
        if s.h[fk] == nil then return nil end
        return ANCHOR[l][i + 1]
      end
      if base(s, l) then return VIEW[l][i + 1] end
      return nil
    end
    if k == "ip" then
      local s = slot(p)
      if s.g == 0 then parse(s) end
      if s.ver == 4 then return ANCHOR[IP4][p[1] + 1] end
      if s.ver == 6 then return VIEW[IP6][p[1] + 1] end
      return nil
    end
    local m = PM[k]
    if m then return m end
    fail(format("pkt.%s: no such field or method", tostring(k)))
  end,
  __newindex = function(_, k)
    fail(format("pkt.%s: a packet's layers and methods are not assigned", tostring(k)))
  end,
  __tostring = function(p) return format("pkts[%s]", tostring(p[1] + 1)) end,
  __metatable = false,
}

-- The queues of balance's fast form: q[i] = queue of pkts[i] (-1 or out of range: dropped).
local QMT = {
  __index = function(_, i)
    if type(i) == "number" and i >= 1 and i <= C.n then return C.q[i - 1] end
    fail(format("q[%s]: not a packet of this batch of %d", tostring(i), C.n))
  end,
  __newindex = function(_, i, x)
    if not (type(i) == "number" and i >= 1 and i <= C.n and i % 1 == 0) then
      fail(format("q[%s]: not a packet of this batch of %d", tostring(i), C.n))
    end
    if x == false or x == nil then x = -1 end
    if type(x) ~= "number" or x % 1 ~= 0 then fail(format("q[%d]: a queue number or false", i)) end
    if not (x >= 0 and x < 64) then x = -1 end
    C.q[i - 1] = x
  end,
  __metatable = false,
}

-- Called once per state by Rust with the address of its `struct lr_ctx`: returns pkts[1..64]
-- and the queue array.
return function(addr, tool)
  -- The FFI library's table holds the metatypes' map: it must live as long as the views, and
  -- scripts do not reach it (package.loaded.ffi is gone). This function's upvalue keeps it:
  -- Rust keeps this function in the registry for the state's life.
  if not ffi then error("no FFI", 0) end
  if C then error("the packets of this state are already made", 0) end
  C = cast("struct lr_ctx *", addr)
  P = C.p
  for i = 0, 63 do SLOT[i + 1] = P + i end
  TOOL = tool
  local w = C.w ~= 0 and 1 or 2
  for l, k in pairs(FK) do
    local t = {}
    for i = 0, 63 do t[i + 1] = cast(FT[l][w], P[i].h + k) end
    ANCHOR[l] = t
  end
  local pkts = {}
  for i = 0, 63 do pkts[i + 1] = setmetatable({ i }, PMT) end
  return pkts, setmetatable({}, QMT)
end
