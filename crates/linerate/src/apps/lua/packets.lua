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
struct lr_ctx { uint32_t n; uint8_t w, dr, eth, ck; struct lr_pkt p[64]; int16_t q[64]; uint64_t dm, dk; };
struct lr_view; struct lr_ip4; struct lr_udp; struct lr_tcp; struct lr_icmp;
]])
-- h[0..3]: where this batch's parse found the IPv4, UDP, TCP and ICMP headers (NULL: not
-- there, or not parsed yet). A layer view (p.ip4, p.udp, ...) is a pointer to its anchor h[k]
-- of the slot, typed by layer: an incomplete struct, so the script can neither index it by
-- number nor do arithmetic on it, only the named fields of its metatype.
assert(ffi.sizeof("struct lr_pkt") == 64 and ffi.sizeof("struct lr_ctx") == 8 + 64 * 64 + 128 + 16)
local HOFF = ffi.offsetof("struct lr_pkt", "h")
local u8p = ffi.typeof("uint8_t *")
local u8pp = ffi.typeof("uint8_t **")
local u16p = ffi.typeof("uint16_t *")
local i32p = ffi.typeof("int32_t *")
local slotp = ffi.typeof("struct lr_pkt *")
local ONE = ffi.new("uint64_t", 1)

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

-- Marks slot `s` for the full recompute of its checksums after the script (gen): its own mark,
-- and its bit of the batch's word of marks, which Rust reads whole (no pass over the slots).
local function mark(s)
  s.dirty = 1
  C.dk = bor(C.dk, lshift(ONE, tonumber(s - P)))
end

local function writable(s, what)
  if C.w == 0 then fail(what .. ": packets are read-only in " .. TOOL .. " scripts") end
  mark(s)
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
--
-- A script's loop and the views it calls are compiled into one trace, in which every function
-- entered or left costs a guard on the function called and a check of LuaJIT's profiler (the
-- stop of compiled code, mod.rs). So the metamethods are made, in make(), as text: one
-- function per layer and direction whose branches, one per field, hold the field's whole code
-- (the anchor, the value's check, the bytes, the checksums): the key being a constant where a
-- script names a field, the trace keeps the one branch, and no function is called below the
-- metamethod. What is rare (addresses as text, methods, errors) is a call out of it.
local FK = { [IP4] = 0, [UDP] = 1, [TCP] = 2, [ICMP] = 3 }
local CTN = { [IP4] = "ip4", [UDP] = "udp", [TCP] = "tcp", [ICMP] = "icmp" }

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
local function badaddr(what)
  fail(what .. ": an address is a string or an integer from 0 to 2^32-1")
end

-- The fields of each fast layer: key, offset, size (bytes), mask of the value (the rest of the
-- bytes kept on a write), and how a write keeps the checksums right: "addr" an IPv4 address
-- (the header checksum and the UDP or TCP one, whose pseudo-header holds it), "full" marks the
-- packet for the full recompute after modify() (fields that move where headers end, and the
-- checksums themselves, as raw writes do), nil the layer's own checksum.
local FF = {
  [IP4] = {
    { "saddr", 12, 4, 0xffffffff, "addr" }, { "daddr", 16, 4, 0xffffffff, "addr" },
    { "src", 12, 4, 0xffffffff, "addr", "text" }, { "dst", 16, 4, 0xffffffff, "addr", "text" },
    { "ttl", 8, 1, 0xff }, { "hlim", 8, 1, 0xff }, { "proto", 9, 1, 0xff, "full" },
    { "next", 9, 1, 0xff, "full" }, { "tos", 1, 1, 0xff }, { "tc", 1, 1, 0xff },
    { "len", 2, 2, 0xffff, "full" }, { "id", 4, 2, 0xffff },
  },
  [UDP] = {
    { "sport", 0, 2, 0xffff }, { "dport", 2, 2, 0xffff }, { "len", 4, 2, 0xffff, "full" },
    { "checksum", 6, 2, 0xffff, "full" },
  },
  [TCP] = {
    { "sport", 0, 2, 0xffff }, { "dport", 2, 2, 0xffff }, { "seq", 4, 4, 0xffffffff },
    { "ack", 8, 4, 0xffffffff }, { "flags", 12, 2, 0x1ff }, { "win", 14, 2, 0xffff },
    { "checksum", 16, 2, 0xffff, "full" },
  },
  [ICMP] = {
    { "type", 0, 1, 0xff }, { "code", 1, 1, 0xff }, { "checksum", 2, 2, 0xffff, "full" },
  },
}

-- RFC 1624's incremental update, as text: a write of 16-bit words m -> m' makes a checksum HC
-- into ~(~HC + ~m + m'). One's complement sums do not depend on the byte order, so the words
-- are taken as they lie in memory; `d` is the sum of ~m + m' over the words written. UDP: a
-- checksum 0 (none sent) stays 0, and a computed 0 is sent as 0xffff.
local function adjust(at, udp)
  local t = "local cp = cast(u16p, " .. at .. ") local c = cp[0] "
  if udp then t = t .. "if c ~= 0 then " end
  t = t .. "c = bxor(c, 0xffff) + d c = band(c, 0xffff) + rshift(c, 16) "
    .. "c = bxor(band(c, 0xffff) + rshift(c, 16), 0xffff) "
  if udp then t = t .. "if c == 0 then c = 0xffff end " end
  t = t .. "cp[0] = c "
  if udp then t = t .. "end " end
  return t
end
local CKT = {
  [IP4] = adjust("b + 10"),
  [UDP] = adjust("b + 6", true),
  [TCP] = adjust("b + 16"),
  [ICMP] = adjust("b + 2"),
}
CKT.addr = CKT[IP4] .. "local hp = cast(u8pp, h) local u = hp[1] if u ~= nil then "
  .. adjust("u + 6", true) .. "else local t = hp[2] if t ~= nil then " .. adjust("t + 16") .. "end end "

-- The text of the getter (`return` the value) and the setter of field `f` of layer `l`.
local function field_text(l, f)
  local key, off, size, mask, fix = f[1], f[2], f[3], f[4], f[5]
  local what = "pkt." .. LNAME[l] .. "." .. key
  local anchor = format('local b = cast(u8pp, h)[0] if b == nil then b = refind(h, %d, "%s") end ', l, key)
  local get, set
  local bad = f[6] and format('badaddr("%s")', what) or format('range("%s", %d)', what, mask)
  local fixt = fix == "full" and format("mark(cast(slotp, cast(u8p, h) - %d)) ", HOFF + 8 * FK[l])
    or "if C.ck ~= 0 then " .. CKT[fix or l] .. "end "
  if size == 1 then
    local wo = off - off % 2 -- the 16-bit word of the checksum the byte is part of
    -- the word's new value computed, not loaded again: LuaJIT's compiled code may take a load
    -- of another type than the store as not aliasing it (and reuse the old value)
    local new = wo == off and "bor(band(m, 0xff00), x)" or "bor(band(m, 0xff), lshift(x, 8))"
    get = anchor .. format("return b[%d] ", off)
    set = format('if type(x) ~= "number" or band(x, %d) ~= x then %s end ', mask, bad) .. anchor
      .. format("local m = cast(u16p, b + %d)[0] b[%d] = x local d = bxor(m, 0xffff) + %s ", wo, off, new)
  elseif size == 2 then
    get = anchor .. format("return band(rshift(bswap(cast(u16p, b + %d)[0]), 16), %d) ", off, mask)
    set = format('if type(x) ~= "number" or band(x, %d) ~= x then %s end ', mask, bad) .. anchor
      .. format("local p = cast(u16p, b + %d) local m = p[0] ", off)
    if mask == 0xffff then
      set = set .. "local n = rshift(bswap(x), 16) "
    else
      set = set .. format("local n = rshift(bswap(bor(band(rshift(bswap(m), 16), %d), x)), 16) ",
        band(bnot(mask), 0xffff))
    end
    set = set .. "p[0] = n local d = bxor(m, 0xffff) + n "
  else
    -- 32 bits: tobit(x) % 2^32 is x only for a whole x from 0 to 2^32-1
    get = anchor .. format("return bswap(cast(i32p, b + %d)[0]) %% 4294967296 ", off)
    set = format('if type(x) ~= "number" or tobit(x) %% 4294967296 ~= x then %s end ', bad) .. anchor
      .. format("local p = cast(u16p, b + %d) local m0, m1 = p[0], p[1] local y = bswap(x) ", off)
      .. "cast(i32p, p)[0] = y local d = bxor(m0, 0xffff) + bxor(m1, 0xffff) + band(y, 0xffff) + rshift(y, 16) "
  end
  return get, set .. fixt .. "return "
end

-- The metamethods of fast layer `l` as text (the writable form when `w`): __index and
-- __newindex, each ending in `sget(h, k)` or `sset(h, k, x)` for what is not a number field.
local function layer_text(l, w)
  local gi, si = {}, {}
  for _, f in ipairs(FF[l]) do
    local get, set = field_text(l, f)
    if f[6] then
      -- an address as text: read by the slow getter; written as a number here
      set = 'if type(x) ~= "number" then return sset(h, k, x) end ' .. set
    else
      gi[#gi + 1] = format('if k == "%s" then %send ', f[1], get)
    end
    if w then si[#si + 1] = format('if k == "%s" then %send ', f[1], set) end
  end
  return "return function(h, k) " .. table.concat(gi) .. "return sget(h, k) end, "
    .. "function(h, k, x) " .. table.concat(si) .. "return sset(h, k, x) end"
end

-- What the generated functions see (as upvalues of their chunk: constants to the compiler).
local function compile(text, name, ...)
  local head = "local C, cast, u8p, u8pp, u16p, i32p, slotp, band, bor, bxor, bnot, rshift, lshift, bswap, tobit, "
    .. "refind, range, badaddr, mark, sget, sset, T0, T1, T2, T3, VIEWS, prep = ... "
  local f = assert(loadstring(head .. text, "=linerate packets " .. name))
  return f(C, cast, u8p, u8pp, u16p, i32p, slotp, band, bor, bxor, bnot, rshift, lshift, bswap, tobit,
    refind, range, badaddr, mark, ...)
end

-- The slow getters and setters of fast layer l: FG[l][key], FS[l][key] (h, x), for the
-- methods, the addresses as text and the read-only tools. Made in make() from the metatypes.
local function text_getters(l)
  local g = {}
  if l == IP4 then
    for key, off in pairs({ src = 12, dst = 16 }) do
      g[key] = function(h)
        local b = cast(u8pp, h)[0]
        if b == nil then b = refind(h, l, key) end
        return format("%d.%d.%d.%d", b[off], b[off + 1], b[off + 2], b[off + 3])
      end
    end
    g.version = function() return 4 end
  end
  return g
end

local FT = {} -- FT[l]: the view type of fast layer l (set in make())

-- MoonGen's layer methods: pkt:udp():setSrcPort(1000) is pkt.udp.sport = 1000.
-- MoonGen's accessor methods (getSrc/setSrc, ...): the method's name and the field it reads
-- and writes, for both kinds of layer view below.
local ACCESSORS = {
  { "Src", "src" }, { "Dst", "dst" }, { "SrcPort", "sport" }, { "DstPort", "dport" },
  { "TTL", "ttl" }, { "Seq", "seq" }, { "Flags", "flags" }, { "Type", "type" }, { "Id", "id" },
}
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
  for _, a in ipairs(ACCESSORS) do both(a[1], a[2]) end
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

-- A packet (pkts[i]) is a `struct lr_view *` at its slot: an incomplete struct, so that a
-- script can neither index it by number nor do arithmetic on it; the views read the slot
-- through it. pslot(p): the slot of packet `p`, checked (a method may be called with anything).
local viewp = ffi.typeof("struct lr_view *")
local function pslot(p)
  if not istype(viewp, p) then fail("not a packet of this batch") end
  local s = cast(slotp, p)
  if s.ok == 0 then bad_index(tonumber(s - P)) end
  return s
end

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
PM.len = function(p) return pslot(p).n end
PM.stream = function(p) return pslot(p).st end
for name, size in pairs({ getByte = 1, getU16 = 2, getU32 = 4 }) do
  PM[name] = function(p, off)
    local s = pslot(p)
    local b = raw_at(s, off, size, name)
    return rd(b, off, size)
  end
end
for name, size in pairs({ setByte = 1, setU16 = 2, setU32 = 4 }) do
  local max = 2 ^ (8 * size) - 1
  PM[name] = function(p, off, x)
    local s = pslot(p)
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
  local s = pslot(p)
  if type(len) ~= "number" or not (len >= 0) or len % 1 ~= 0 then
    fail("bytes: the length is a whole number from 0, not " .. tostring(len))
  end
  local b = raw_at(s, off, len, "bytes")
  return fstring(b + off, len)
end
PM.data = function(p)
  local s = pslot(p)
  return fstring(cast(u8p, s.a), s.n)
end
PM.drop = function(p)
  local s = pslot(p)
  if C.dr == 0 then fail("drop(): " .. TOOL .. " scripts do not drop packets") end
  s.drop = 1
  C.dm = bor(C.dm, lshift(ONE, tonumber(s - P))) -- the batch's drops, read whole by Rust
end
PM.dropped = function(p) return pslot(p).drop ~= 0 end
PM.payloadOffset = function(p)
  local s = pslot(p)
  if s.g == 0 then parse(s) end
  if s.l4ok == 0 or not (s.proto == 6 or s.proto == 17) then
    fail("payloadOffset: the packet has no UDP or TCP header")
  end
  return s.pay
end
PM.raw = function(p) return p end

-- What a packet's generated __index does not answer itself: the other layers, `ip` of an IPv6
-- packet, the methods; and its parse when the slot has none (a raw write, or not a packet of
-- this batch: an error).
local function prep(p)
  local s = pslot(p)
  parse(s)
end
local function pslow(p, k)
  local s = pslot(p)
  if s.g == 0 then parse(s) end
  local l = LAYER[k]
  local i = tonumber(s - P)
  if l then
    if FK[l] then
      if s.h[FK[l]] == nil then return nil end
      return cast(FT[l], s.h + FK[l])
    end
    if base(s, l) then return VIEW[l][i + 1] end
    return nil
  end
  if k == "ip" then
    if s.ver == 4 then return cast(FT[IP4], s.h) end
    if s.ver == 6 then return VIEW[IP6][i + 1] end
    return nil
  end
  local m = PM[k]
  if m then return m end
  fail(format("pkt.%s: no such field or method", tostring(k)))
end

-- A packet's __index: the fast layers inline (the slot's parse, the anchor, the view made in
-- the trace and sunk: no allocation), the rest from pslow.
local function packet_text()
  local t = {}
  for l, k in pairs(FK) do
    t[#t + 1] = format('if k == "%s" then local s = cast(slotp, p) if s.g == 0 then prep(p) end '
      .. "local a = s.h + %d if a[0] == nil then return nil end return cast(T%d, a) end ", LNAME[l], k, k)
  end
  t[#t + 1] = 'if k == "ip" then local s = cast(slotp, p) if s.g == 0 then prep(p) end '
    .. "if s.ver == 4 then return cast(T0, s.h + 0) end end "
  return "return function(p, k) " .. table.concat(t) .. "return VIEWS(p, k) end"
end

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
  local w = C.w ~= 0
  -- The fast layers' metatypes, for this state's tool (writable or not).
  for l, k in pairs(FK) do
    local name = LNAME[l]
    local ct = "struct lr_" .. CTN[l]
    local pt = ffi.typeof(ct .. " *")
    FT[l] = pt
    local tg = text_getters(l)
    local keys = {}
    for _, f in ipairs(FF[l]) do keys[f[1]] = true end
    if l == IP4 then keys.version = true end
    local function nofield(key)
      fail(format("pkt.%s.%s: no such field (pkt.%s has %s)", name, tostring(key), name, FIELDS[l]))
    end
    local m = {}
    local function sget(h, key)
      local f = tg[key]
      if f then return f(h) end
      local mm = m[key]
      if mm then return mm end
      nofield(key)
    end
    local function sset(h, key, x)
      if not keys[key] then nofield(key) end
      if key == "version" then fail("pkt.ip4.version is read-only") end
      if not w then fail(format("pkt.%s.%s: packets are read-only in %s scripts", name, key, TOOL)) end
      if type(x) == "string" then
        local a = parse_addr(x, false)
        if not a then fail(format("pkt.ip4.%s: '%s' is not an IPv4 address", key, x)) end
        local c1, c2, c3, c4 = a:byte(1, 4)
        h[key == "src" and "saddr" or "daddr"] = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
        return
      end
      badaddr("pkt.ip4." .. key)
    end
    -- Methods are plain functions a script can call with anything: each checks that it got
    -- a view of its own layer (a number or another layer's view would be an address).
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
      if keys[key] then
        method("get" .. mname, function(h) return h[key] end)
        method("set" .. mname, function(h, x) h[key] = x end)
      end
    end
    for _, a in ipairs(ACCESSORS) do both(a[1], a[2]) end
    if l == IP4 then
      method("getSrcNum", function(h) return h.saddr end)
      method("getDstNum", function(h) return h.daddr end)
      method("setSrcNum", function(h, x) h.saddr = x end)
      method("setDstNum", function(h, x) h.daddr = x end)
    end
    local idx, nidx = compile(layer_text(l, w), name, sget, sset)
    ffi.metatype(ct, {
      __index = idx,
      __newindex = nidx,
      __call = function(h) return h end,
      __tostring = function(h)
        local s = cast(slotp, cast(u8p, h) - (HOFF + 8 * k))
        return format("pkts[%d].%s", tonumber(s - P) + 1, name)
      end,
    })
  end
  ffi.metatype("struct lr_view", {
    __index = compile(packet_text(), "packet", nil, nil, FT[IP4], FT[UDP], FT[TCP], FT[ICMP], pslow, prep),
    __newindex = function(_, k)
      fail(format("pkt.%s: a packet's layers and methods are not assigned", tostring(k)))
    end,
    __tostring = function(p) return format("pkts[%d]", tonumber(cast(slotp, p) - P) + 1) end,
  })
  local pkts = {}
  for i = 0, 63 do pkts[i + 1] = cast(viewp, P + i) end
  return pkts, setmetatable({}, QMT)
end
