//! The packet objects of every script: `pkts[1..n]` in gen's `modify(pkts, n)`, balance's
//! `balance(pkts, n, q)` and fwd's `filter(pkts, n)`: one API, documented in docs/lua.md.
//!
//! The packets are views of the frames themselves, through LuaJIT's FFI (MoonGen's way): no
//! copy, no allocation and no call into Rust per packet or per field. Each [`Packets`] owns a C
//! array of slots (`struct lr_pkt`: the frame's address and length, its stream, the flags a
//! script sets), allocated once; its address is handed to the Lua side once, when the packets
//! are made, and once per batch Rust fills the slots of the batch's frames, calls the script,
//! reads the flags back and clears the slots (fwd and gen, which need only the drops or the
//! packets to fix, leave them to the next load: no script code runs in between). The Lua side is `packets.lua` (embedded), loaded
//! into every script's state by [`install`]: it parses headers (VLAN and QinQ tags, IPv6
//! extension headers, fragments: the rules of [`crate::wire::parse()`]) once per packet and
//! batch when a layer is first asked for, and checks every access against the frame's length.
//!
//! Fields by name, as MoonGen's scripts read them: `pkt.eth.src`, `pkt.vlan.id`,
//! `pkt.ip4.dst`, `pkt.ip6.hlim`, `pkt.ip.src` (either family), `pkt.udp.dport`,
//! `pkt.tcp.flags`. A layer the packet does not have is `nil`. Assigning a field writes the
//! frame (gen); elsewhere it is an error naming the tool. The MoonGen-style chain
//! `pkt:udp():setSrcPort(1000)` and raw accessors (`getU16(off)`, `setU32(off, v)`,
//! 0-based, big-endian) work everywhere the same.

use crate::mem::{Batch, BATCH};
use crate::wire::{self, LinkType};
use mlua::{Function, LightUserData, Lua, Table, Value};
use std::cell::Cell;
use std::net::IpAddr;
use std::rc::Rc;

/// The Lua side of the packets (LuaJIT FFI views), run once in every script's state.
const PRELUDE: &str = include_str!("packets.lua");

/// packets.lua on one line, comments out: what [`install`] loads. With LuaJIT's profiler on (the
/// stop of compiled code, `sys::luajit`: mode `l`), a trace checks the profiler's flag, with a
/// snapshot, at every new source line and function it records; the views inlined into a
/// script's loop had some 50 such checks per packet (two fields set), which took a third of the
/// loop's time and made some loops abort. On one line, they have one per function entered or
/// left. Errors of the views name the script's line (they are raised at level 0 and placed
/// from the traceback), never packets.lua's.
fn prelude() -> &'static str {
    static ONE_LINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ONE_LINE.get_or_init(|| one_line(PRELUDE))
}

/// Lua source on one line: each line's `--` comment taken out (outside strings), the lines
/// joined by spaces. For sources whose lines never start with `(` (joined, such a line would
/// call the previous one's value) nor have a multi-line string or comment other than a
/// `[[ ... ]]` of C declarations, in which newlines are spaces too: packets.lua, which a test
/// checks.
fn one_line(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let b = line.as_bytes();
        let (mut quote, mut i, mut cut) = (0u8, 0, b.len());
        while i < b.len() {
            let c = b[i];
            if quote != 0 {
                if c == b'\\' {
                    i += 1;
                } else if c == quote {
                    quote = 0;
                }
            } else if c == b'"' || c == b'\'' {
                quote = c;
            } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
                cut = i;
                break;
            }
            i += 1;
        }
        let code = line[..cut].trim();
        if !code.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(code);
        }
    }
    out
}

/// Where [`install`] keeps the function that makes a state's packets.
const MAKER: &str = "linerate.packets.make";

/// What a tool lets its scripts do with the packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// The tool's name, for messages ("gen", "balance", "fwd").
    pub tool: &'static str,
    /// Whether fields and bytes may be written (the tool sends the changed packets).
    pub write: bool,
    /// Whether `pkt:drop()` is allowed (the tool does not deliver dropped packets).
    pub drop: bool,
}

/// One packet as the Lua side sees it: `struct lr_pkt` of packets.lua (64 bytes), as eight
/// words, each written whole: filling a slot field by field took some twenty narrow stores a
/// packet, which were most of gen's load of a batch. Cells: the script writes them through the
/// pointer while Rust holds only shared references. The words hold the fields in the byte
/// order of the machine, as the Lua side's struct reads them.
#[repr(C)]
struct Slot {
    addr: Cell<u64>,
    /// Bytes 8..16: the frame's length (u32), its stream (u16), `drop` and `dirty` (the
    /// script's marks: dropped; written otherwise than by the checksum-keeping setters).
    meta: Cell<u64>,
    /// Bytes 16..24: `ok` (a packet of this batch), `g` (parsed), then what the parser found
    /// ([`parse_frame`], or packets.lua's `parse` after a raw write): IP version, protocol,
    /// VLAN tags, whether the transport header is whole (u8 each), where the network layer
    /// starts (`l3`, u16).
    state: Cell<u64>,
    /// Bytes 24..32: where the transport header, the datagram's end and the payload are
    /// (`l4`, `l3e`, `pay`, u16 each), two bytes of padding.
    offs: Cell<u64>,
    /// Where the Lua side's parser found the IPv4, UDP, TCP and ICMP headers (0: not found,
    /// or not parsed in this batch): what its layer views read and write through.
    heads: [Cell<u64>; 4],
}

impl Slot {
    /// The `meta` word of a frame of `len` bytes of stream `stream`, unmarked.
    #[inline(always)]
    fn meta_of(len: usize, stream: u16) -> u64 {
        let l = u32::try_from(len).unwrap_or(0).to_ne_bytes();
        let s = stream.to_ne_bytes();
        u64::from_ne_bytes([l[0], l[1], l[2], l[3], s[0], s[1], 0, 0])
    }

    /// Sets the slot's stream, its length and marks as they were.
    fn set_stream(&self, stream: u16) {
        let mut b = self.meta.get().to_ne_bytes();
        b[4..6].copy_from_slice(&stream.to_ne_bytes());
        self.meta.set(u64::from_ne_bytes(b));
    }

    #[cfg(test)]
    fn len(&self) -> u32 {
        let b = self.meta.get().to_ne_bytes();
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    #[cfg(test)]
    fn stream(&self) -> u16 {
        let b = self.meta.get().to_ne_bytes();
        u16::from_ne_bytes([b[4], b[5]])
    }

    fn dropped(&self) -> bool {
        self.meta.get().to_ne_bytes()[6] != 0
    }

    fn dirty(&self) -> bool {
        self.meta.get().to_ne_bytes()[7] != 0
    }

    #[cfg(test)]
    fn ok(&self) -> u8 {
        self.state.get().to_ne_bytes()[0]
    }

    /// Points the slot at a frame (its address, length and stream) with parse `w`: a packet
    /// of this batch, unmarked.
    #[inline(always)]
    fn put(&self, addr: u64, len: usize, stream: u16, w: &Words) {
        self.addr.set(addr);
        self.meta.set(Slot::meta_of(len, stream));
        self.state.set(w.state);
        self.offs.set(w.offs);
        for (h, &v) in self.heads.iter().zip(&w.heads) {
            h.set(v);
        }
    }

    /// Ends the slot's batch: no frame, length 0, not a packet of a batch, no parse; the
    /// stream and the script's marks stay readable until the next batch.
    #[inline(always)]
    fn clear(&self) {
        self.addr.set(0);
        let b = self.meta.get().to_ne_bytes();
        self.meta
            .set(u64::from_ne_bytes([0, 0, 0, 0, b[4], b[5], b[6], b[7]]));
        self.state.set(0);
        self.heads.iter().for_each(|h| h.set(0));
    }

    /// What the slot's words say of its parse (tests).
    #[cfg(test)]
    fn parse(&self) -> Parsed {
        let s = self.state.get().to_ne_bytes();
        let o = self.offs.get().to_ne_bytes();
        Parsed {
            parsed: s[1],
            ver: s[2],
            proto: s[3],
            nvl: s[4],
            l4ok: s[5],
            l3: u16::from_ne_bytes([s[6], s[7]]),
            l4: u16::from_ne_bytes([o[0], o[1]]),
            l3e: u16::from_ne_bytes([o[2], o[3]]),
            pay: u16::from_ne_bytes([o[4], o[5]]),
            heads: std::array::from_fn(|k| self.heads[k].get()),
        }
    }
}

/// `struct lr_ctx` of packets.lua: the batch's slots, balance's queues and the drops.
#[repr(C)]
struct Shared {
    n: Cell<u32>,
    write: Cell<u8>,
    drop: Cell<u8>,
    eth: Cell<u8>,
    /// Whether the fast layers' setters keep the checksums right as they write (gen, unless
    /// the script set `checksums = false`).
    ck: Cell<u8>,
    pkts: [Slot; BATCH],
    queues: [Cell<i16>; BATCH],
    /// The packets of this batch the script dropped, bit `i` for packet `i` (`pkt:drop()` sets
    /// it with the slot's mark): read whole when the batch ends ([`Packets::drops`]).
    drops: Cell<u64>,
    /// The packets of this batch marked for the full recompute of their checksums (written
    /// otherwise than by the checksum-keeping setters), bit `i` for packet `i`, set with the
    /// slot's `dirty` mark: read whole when gen's batch ends ([`Packets::end_written`]).
    dirt: Cell<u64>,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 64 && BATCH == 64);
// Where packets.lua's `struct lr_pkt` has them (the parse is written from both sides).
const _: () = assert!(
    std::mem::offset_of!(Slot, meta) == 8
        && std::mem::offset_of!(Slot, state) == 16
        && std::mem::offset_of!(Slot, offs) == 24
        && std::mem::offset_of!(Slot, heads) == 32
);
const _: () = assert!(std::mem::size_of::<Shared>() == 8 + 64 * 64 + 128 + 16);

/// Loads the packet views into `lua` (before any script runs): keeps the FFI library for them
/// and takes it out of the script's reach.
pub fn install(lua: &Lua) -> mlua::Result<()> {
    let text = lua.create_function(|_, b: mlua::String| {
        let b = b.as_bytes();
        Ok(match <[u8; 16]>::try_from(&b[..]) {
            Ok(a) => IpAddr::from(a).to_string(),
            Err(_) => String::new(),
        })
    })?;
    let parse = lua.create_function(|lua, (s, v6): (mlua::String, bool)| {
        let s = s.to_str()?;
        let b = match (s.parse::<IpAddr>(), v6) {
            (Ok(IpAddr::V4(a)), false) => a.octets().to_vec(),
            (Ok(IpAddr::V6(a)), true) => a.octets().to_vec(),
            _ => return Ok(Value::Nil),
        };
        Ok(Value::String(lua.create_string(b)?))
    })?;
    let mac = lua.create_function(|lua, s: mlua::String| {
        let s = s.to_str()?;
        Ok(match crate::apps::gen::vary::parse_mac(&s) {
            Ok(m) => (Value::String(lua.create_string(m)?), Value::Nil),
            Err(e) => (Value::Nil, Value::String(lua.create_string(e)?)),
        })
    })?;
    let make: Function = lua
        .load(prelude())
        .set_name("=linerate packets")
        .call((text, parse, mac))?;
    lua.set_named_registry_value(MAKER, make)
}

/// The packets of one batch, as a script sees them: made once per script state.
pub struct Packets {
    shared: Rc<Shared>,
    table: Table,
    queues: Table,
    access: Access,
    /// How many slots from the first may still point at frames: the last batch's, when it
    /// ended by [`Packets::drops`], which leaves them for the next load to overwrite.
    live: Cell<usize>,
}

impl Packets {
    /// Makes `pkts[1..BATCH]` in `lua` (a state [`install`] set up) for packets of link type
    /// `link` (Ethernet, or raw IP for any other).
    pub fn new(lua: &Lua, access: Access, link: LinkType) -> mlua::Result<Packets> {
        let shared = Rc::new(Shared {
            n: Cell::new(0),
            write: Cell::new(u8::from(access.write)),
            drop: Cell::new(u8::from(access.drop)),
            eth: Cell::new(u8::from(link == LinkType::ETHERNET)),
            ck: Cell::new(u8::from(access.write)),
            pkts: std::array::from_fn(|_| Slot {
                addr: Cell::new(0),
                meta: Cell::new(0),
                state: Cell::new(0),
                offs: Cell::new(0),
                heads: Default::default(),
            }),
            queues: std::array::from_fn(|_| Cell::new(-1)),
            drops: Cell::new(0),
            dirt: Cell::new(0),
        });
        // The state keeps the slots alive as long as it lives: a script's code that runs late
        // (a __gc at close) still finds them (empty).
        let _ = lua.set_app_data(shared.clone());
        let make: Function = lua.named_registry_value(MAKER)?;
        let at = LightUserData(Rc::as_ptr(&shared).cast_mut().cast());
        let (table, queues): (Table, Table) = make.call((at, access.tool))?;
        Ok(Packets {
            shared,
            table,
            queues,
            access,
            live: Cell::new(0),
        })
    }

    /// The table the script gets (`pkts`).
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// The queue array of balance's fast form (`q`: `q[i] = queue of pkts[i]`).
    pub fn queues(&self) -> &Table {
        &self.queues
    }

    /// Points the slots at the batch's frames (their addresses go to the Lua side) and parses
    /// each ([`parse_frame`]): the Lua side's views then find their headers without parsing in
    /// Lua, where the parse took most of a simple script's time. One pass, each slot written
    /// once; returns how many frames (at most [`BATCH`]).
    #[inline(always)]
    fn fill<'a>(&self, frames: impl Iterator<Item = &'a [u8]>, streams: &[u8]) -> usize {
        let eth = self.shared.eth.get() != 0;
        let slots = self.shared.pkts.iter().zip(frames);
        // Streams (tests only: the tools' loads have none) set apart, in a second pass: the
        // loop of every batch looks up no stream.
        let mut n = 0;
        for (s, b) in slots {
            put_frame(s, b, 0, eth);
            n += 1;
        }
        for (s, &st) in self.shared.pkts[..n].iter().zip(streams) {
            s.set_stream(u16::from(st));
        }
        self.shared.queues[..n].iter().for_each(|q| q.set(-1));
        self.settle(n);
        n
    }

    /// Ends a load of `n` packets: the slots after them that the last batch left pointing at
    /// its frames ([`Packets::drops`]) are cleared.
    #[inline(always)]
    fn settle(&self, n: usize) {
        let live = self.live.get().min(BATCH);
        if live > n {
            self.shared.pkts[n..live].iter().for_each(Slot::clear);
        }
        self.live.set(n);
        self.shared.n.set(n as u32);
        self.shared.drops.set(0);
        self.shared.dirt.set(0);
    }

    /// Shows the packets of `batch` (at most [`BATCH`]) to the script, read-only (the tool's
    /// [`Access`] must not allow writes); `streams[i]` is what `pkts[i]:stream()` returns (0
    /// when absent). Returns how many. [`Packets::done`] ends the batch.
    pub fn load(&self, batch: &Batch, streams: &[u8]) -> Result<usize, String> {
        if self.access.write {
            return Err("the packets of a writing tool need load_mut".into());
        }
        Ok(self.fill(batch.frames(), streams))
    }

    /// As [`Packets::load`], with the frames writable by the script.
    pub fn load_mut(&self, batch: &mut Batch, streams: &[u8]) -> Result<usize, String> {
        let n = batch.len().min(BATCH);
        // The script writes the frames through their addresses: taken from the mutable
        // borrows, read through shared ones for the parse.
        let mut at = [(0u64, 0usize); BATCH];
        for (i, a) in at[..n].iter_mut().enumerate() {
            let d = batch.data_mut(i);
            *a = (d.as_mut_ptr() as u64, d.len());
        }
        self.fill(batch.frames(), streams);
        for (s, &(a, _)) in self.shared.pkts[..n].iter().zip(&at[..n]) {
            debug_assert_eq!(s.addr.get(), a);
            s.addr.set(a);
        }
        Ok(n)
    }

    /// As [`Packets::load_mut`], for frames a generator has just built from its streams'
    /// templates (gen's `modify`): two frames of one stream and one length have the same
    /// headers at the same places (only addresses, ports, MACs and the payload differ), so a
    /// frame that follows one of its stream and length takes that frame's parse, moved to its
    /// own address, rather than parsing again; the others are parsed (`parse_frame`).
    pub fn load_built(&self, batch: &mut Batch, streams: &[u8]) -> Result<usize, String> {
        let n = batch.len().min(BATCH);
        Ok(self.put_built(n, batch, streams))
    }

    /// As [`Packets::load_built`], for frames built straight into a port's frames (gen
    /// without a group: [`crate::apps::gen::Hook::modify_frames`]): packet `i` is
    /// `frames[i][..lens[i]]`.
    pub fn load_frames(&self, frames: &mut [&mut [u8]], lens: &[u32], streams: &[u8]) -> usize {
        let n = frames.len().min(lens.len()).min(BATCH);
        self.put_built(n, &mut PortFrames(frames, lens), streams)
    }

    #[inline(always)]
    fn put_built(&self, n: usize, frames: &mut impl Frames, streams: &[u8]) -> usize {
        let eth = self.shared.eth.get() != 0;
        // The previous frame's stream, length (none yet: a length no frame has) and address,
        // and its parse as the slot's words: kept in registers, each slot written in eight
        // whole words. balance's queues are not touched: gen's scripts have none.
        let (mut pst, mut plen, mut pa) = (0u16, usize::MAX, 0u64);
        let mut w = Words::default();
        for (i, s) in self.shared.pkts[..n].iter().enumerate() {
            let d = frames.frame(i);
            let (a, len) = (d.as_mut_ptr() as u64, d.len());
            let st = streams.get(i).map_or(0, |&v| u16::from(v));
            if st == pst && len == plen {
                w.moved(pa, a);
            } else {
                w = parse_frame(d, eth).words();
                (pst, plen) = (st, len);
            }
            pa = a;
            s.put(a, len, st, &w);
        }
        self.settle(n);
        n
    }

    /// Whether the fast layers' setters (`p.ip4.src = x`, `p.udp.sport = x`, ...) update the
    /// IPv4 header and transport checksums as they write (RFC 1624), for the batches from now
    /// on; a packet written otherwise (raw bytes, other layers, lengths, the checksums
    /// themselves) is still marked for [`Packets::store`]'s full recompute.
    pub fn set_checksums(&self, on: bool) {
        self.shared.ck.set(u8::from(on && self.access.write));
    }

    /// Whether the script dropped packet `i` (0-based) of the batch.
    pub fn dropped(&self, i: usize) -> bool {
        i < self.shared.n.get() as usize && self.shared.pkts[i].dropped()
    }

    /// The queue the script's fast form gave packet `i` (`q[i + 1]`; None: none, or dropped).
    pub fn queue(&self, i: usize) -> Option<u8> {
        let q = self.shared.queues.get(i)?.get();
        (i < self.shared.n.get() as usize && (0..64).contains(&q)).then_some(q as u8)
    }

    /// Ends the batch: the slots no longer point at its frames (a script that kept `pkts`
    /// finds them empty until the next batch). What the script decided ([`Packets::dropped`],
    /// [`Packets::queue`]) stays readable until the next batch.
    pub fn done(&self) {
        let n = self.live.replace(0).min(BATCH);
        for s in &self.shared.pkts[..n] {
            s.clear();
        }
    }

    /// The packets the script dropped (bit `i` for packet `i`, 0-based), ending the batch
    /// without a pass over its slots: they keep pointing at its frames until the next load
    /// overwrites or clears them, or [`Packets::done`]. No script code may run in between: a
    /// tool that ends its batches here calls `done` before its state can run any other code
    /// (its close, whose `__gc` functions could read the slots).
    pub fn drops(&self) -> u64 {
        self.shared.drops.get()
    }

    /// Ends the batch as [`Packets::done`] does, in the same pass handing on what the script
    /// decided for each packet `i` (0-based): `each(i, dropped, queue)`, `queue` being what
    /// balance's fast form left in `q[i + 1]` (-1: none; else 0 to 63). One loop over the
    /// slots, where [`Packets::dropped`] and [`Packets::queue`] then `done` took two.
    pub fn finish(&self, mut each: impl FnMut(usize, bool, i16)) {
        let n = (self.shared.n.get() as usize).min(BATCH);
        self.live.set(0);
        let slots = self.shared.pkts[..n].iter().zip(&self.shared.queues[..n]);
        for (i, (s, q)) in slots.enumerate() {
            each(i, s.dropped(), q.get());
            s.clear();
        }
    }

    /// After a writing script: calls `fix(i, bytes)` (which recomputes checksums) on every
    /// packet the script changed in a way its setters did not keep the checksums right for
    /// (raw bytes, Ethernet/VLAN/IPv6 fields, lengths, protocol, checksums), then ends the
    /// batch ([`Packets::done`]).
    pub fn store(&self, batch: &mut Batch, fix: impl FnMut(usize, &mut [u8])) {
        self.store_with(batch, fix);
    }

    /// As [`Packets::store`], for the frames of [`Packets::load_frames`].
    pub fn store_frames(
        &self,
        frames: &mut [&mut [u8]],
        lens: &[u32],
        fix: impl FnMut(usize, &mut [u8]),
    ) {
        self.store_with(&mut PortFrames(frames, lens), fix);
    }

    /// Ends a writing script's batch (gen's) as [`Packets::drops`] ends fwd's, without a pass
    /// over the slots: they keep pointing at the batch's frames until the next load overwrites
    /// or clears them, or [`Packets::done`] (no script code may run in between: the tool calls
    /// `done` before its state closes). `fix(i, frame)` is called for each packet the script
    /// marked for the full recompute (as [`Packets::store`] does), found in one word of marks.
    pub fn end_written(&self, batch: &mut Batch, fix: impl FnMut(usize, &mut [u8])) {
        self.fix_marked(batch, fix);
    }

    /// As [`Packets::end_written`], for the frames of [`Packets::load_frames`].
    pub fn end_written_frames(
        &self,
        frames: &mut [&mut [u8]],
        lens: &[u32],
        fix: impl FnMut(usize, &mut [u8]),
    ) {
        self.fix_marked(&mut PortFrames(frames, lens), fix);
    }

    #[inline(always)]
    fn fix_marked(&self, frames: &mut impl Frames, mut fix: impl FnMut(usize, &mut [u8])) {
        let len = frames.count();
        let mut m = self.shared.dirt.get();
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if i < len {
                fix(i, frames.frame(i));
            }
        }
    }

    #[inline(always)]
    fn store_with(&self, frames: &mut impl Frames, mut fix: impl FnMut(usize, &mut [u8])) {
        let len = frames.count();
        // One pass: each slot's mark read as the slot is cleared ([`Packets::done`]).
        let n = (self.shared.n.get() as usize).min(BATCH);
        self.live.set(0);
        for (i, s) in self.shared.pkts[..n].iter().enumerate() {
            let dirty = s.dirty();
            s.clear();
            if dirty && i < len {
                fix(i, frames.frame(i));
            }
        }
    }
}

/// Points slot `s` at frame `b` of stream `st`, with its parse: the common frame's words made
/// in registers and stored whole; any other frame takes the full parse, out of line. Through
/// `parse_frame` (a `Parsed` on the stack, zeroed and written in narrow stores, then read back
/// in wide loads), each frame's words waited on a failed store forwarding: a third of balance
/// -m lua's master.
#[inline(always)]
fn put_frame(s: &Slot, b: &[u8], st: u16, eth: bool) {
    let a = b.as_ptr() as u64;
    match common_udp4(b, eth) {
        Some(stop) => s.put(a, b.len(), st, &Words::common_udp4(a, stop)),
        None => s.put(a, b.len(), st, &parse_words(b, eth)),
    }
}

/// The frames a writing script's packets are in: a batch's, or a port's transmit frames
/// (gen building in place).
trait Frames {
    fn count(&self) -> usize;
    /// Frame `i` (below [`Frames::count`]).
    fn frame(&mut self, i: usize) -> &mut [u8];
}

impl Frames for Batch {
    fn count(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn frame(&mut self, i: usize) -> &mut [u8] {
        self.data_mut(i)
    }
}

/// A port's transmit frames and the lengths of the packets built in them.
struct PortFrames<'a, 'b>(&'a mut [&'b mut [u8]], &'a [u32]);

impl Frames for PortFrames<'_, '_> {
    fn count(&self) -> usize {
        self.0.len().min(self.1.len())
    }
    #[inline(always)]
    fn frame(&mut self, i: usize) -> &mut [u8] {
        let f = &mut *self.0[i];
        let l = (self.1[i] as usize).min(f.len());
        &mut f[..l]
    }
}

/// What the parse finds in one frame: the parse fields of a [`Slot`], computed in registers
/// and stored into the slot once ([`Parsed::store`]), rather than cleared there field by field
/// and set again.
#[derive(Clone, Copy, Default)]
struct Parsed {
    parsed: u8,
    ver: u8,
    proto: u8,
    nvl: u8,
    l4ok: u8,
    l3: u16,
    l4: u16,
    l3e: u16,
    pay: u16,
    heads: [u64; 4],
}

/// A parse as a slot's words (`state`, `offs`, `heads`: [`Slot`]), `ok` set.
#[derive(Clone, Copy, Default)]
struct Words {
    state: u64,
    offs: u64,
    heads: [u64; 4],
}

impl Words {
    /// The parse of a common frame ([`common_udp4`]) at `base` whose datagram ends at `stop`:
    /// as [`parse_frame`] finds it, made without going through memory.
    #[inline(always)]
    fn common_udp4(base: u64, stop: u16) -> Words {
        let (l3, l4, pay, e) = (
            14u16.to_ne_bytes(),
            34u16.to_ne_bytes(),
            42u16.to_ne_bytes(),
            stop.to_ne_bytes(),
        );
        Words {
            state: u64::from_ne_bytes([1, 1, 4, 17, 0, 1, l3[0], l3[1]]),
            offs: u64::from_ne_bytes([l4[0], l4[1], e[0], e[1], pay[0], pay[1], 0, 0]),
            heads: [base + 14, base + 34, 0, 0],
        }
    }

    /// This parse of the frame at `from`, for a frame with the same headers at the same places
    /// at `to`: the header addresses moved.
    #[inline(always)]
    fn moved(&mut self, from: u64, to: u64) {
        let d = to.wrapping_sub(from);
        for h in &mut self.heads {
            *h = if *h != 0 { h.wrapping_add(d) } else { 0 };
        }
    }
}

impl Parsed {
    #[inline(always)]
    fn words(&self) -> Words {
        let (l3, l4) = (self.l3.to_ne_bytes(), self.l4.to_ne_bytes());
        let (l3e, pay) = (self.l3e.to_ne_bytes(), self.pay.to_ne_bytes());
        let (p, v, pr, nvl, ok4) = (self.parsed, self.ver, self.proto, self.nvl, self.l4ok);
        Words {
            state: u64::from_ne_bytes([1, p, v, pr, nvl, ok4, l3[0], l3[1]]),
            offs: u64::from_ne_bytes([l4[0], l4[1], l3e[0], l3e[1], pay[0], pay[1], 0, 0]),
            heads: self.heads,
        }
    }
}

/// [`parse_frame`]'s words, out of line: the frames other than the common one.
#[inline(never)]
fn parse_words(b: &[u8], eth: bool) -> Words {
    parse_frame(b, eth).words()
}

/// linerate's parser (the rules of [`crate::wire::parse()`]: VLAN/QinQ tags, IPv4 with AH
/// stepped over, IPv6 extension headers, later fragments without transport header), as
/// packets.lua's `parse` does it (which parses again after a raw write): the layer starts, and
/// `heads` where the IPv4, UDP, TCP and ICMP headers are. A frame longer than the slot's 16-bit
/// offsets is left for the Lua side's parse (`parsed` 0).
#[inline(always)]
fn parse_frame(b: &[u8], eth: bool) -> Parsed {
    let mut p = Parsed::default();
    if b.len() > usize::from(u16::MAX) {
        return p;
    }
    p.parsed = 1;
    if let Some(stop) = common_udp4(b, eth) {
        let base = b.as_ptr() as u64;
        p.ver = 4;
        p.proto = 17;
        p.l4ok = 1;
        p.l3 = 14;
        p.l4 = 34;
        p.l3e = stop;
        p.pay = 42;
        p.heads[0] = base + 14;
        p.heads[1] = base + 34;
        return p;
    }
    parse_layers(&mut p, b, eth);
    p
}

/// The common frame first: untagged Ethernet, IPv4 without options, not a later fragment, UDP
/// whole inside the datagram and the frame (at most 65535 bytes), whose parse is constant but
/// for where the datagram ends, which this returns; None for any other frame, which takes the
/// full parse ([`parse_frame`]: it finds the same for this one).
#[inline(always)]
fn common_udp4(b: &[u8], eth: bool) -> Option<u16> {
    if !eth || b.len() < 14 + 20 + 8 || b.len() > usize::from(u16::MAX) {
        return None;
    }
    let h = &b[14..34];
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let stop = (14 + total).min(b.len());
    (b[12] == 8
        && b[13] == 0
        && h[0] == 0x45
        && total >= 20
        && u16::from_be_bytes([h[6], h[7]]) & 0x1fff == 0
        && h[9] == 17
        && stop >= 34 + 8)
        .then_some(stop as u16)
}

fn parse_layers(s: &mut Parsed, b: &[u8], eth: bool) {
    let n = b.len();
    let base = b.as_ptr() as u64;
    let be16 = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
    let mut off = 0;
    let mut want = 0;
    if eth {
        if n < 14 {
            return;
        }
        let mut et = be16(12);
        off = 14;
        let mut k = 0;
        while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
            if k == 4 || off + 4 > n {
                return;
            }
            et = be16(off + 2);
            off += 4;
            k += 1;
        }
        s.nvl = k;
        want = match et {
            0x0800 => 4,
            0x86dd => 6,
            _ => return,
        };
    }
    if off >= n {
        return;
    }
    let v = b[off] >> 4;
    if want != 0 && v != want {
        return;
    }
    if v == 4 {
        let hl = usize::from(b[off] & 15) * 4;
        if hl < 20 || off + hl > n {
            return;
        }
        let total = usize::from(be16(off + 2));
        if total < hl {
            return;
        }
        let stop = (off + total).min(n);
        s.ver = 4;
        s.l3 = off as u16;
        s.l3e = stop as u16;
        s.heads[0] = base + off as u64;
        let mut pr = b[off + 9];
        s.proto = pr;
        if be16(off + 6) & 0x1fff != 0 {
            return; // a later fragment
        }
        let mut at = off + hl;
        // AH headers: at most 4 stepped over
        for _ in 0..4 {
            if pr != 51 {
                break;
            }
            if at + 2 > n {
                return;
            }
            (pr, at) = (b[at], at + (usize::from(b[at + 1]) + 2) * 4);
            if at > stop {
                return;
            }
        }
        transport(s, b, at, stop, pr);
    } else if v == 6 {
        if off + 40 > n {
            return;
        }
        let pl = usize::from(be16(off + 4));
        let stop = if pl == 0 { n } else { (off + 40 + pl).min(n) };
        s.ver = 6;
        s.l3 = off as u16;
        s.l3e = stop as u16;
        let (mut nh, mut at) = (b[off + 6], off + 40);
        let mut steps = 0;
        loop {
            s.proto = nh;
            if nh == 59 {
                return;
            }
            if !matches!(nh, 0 | 43 | 44 | 60 | 51 | 135 | 139 | 140) {
                break;
            }
            if steps == 8 || at + 2 > stop {
                return;
            }
            steps += 1;
            let (nx, ln) = (b[at], usize::from(b[at + 1]));
            let hlen = match nh {
                44 => 8,
                51 => (ln + 2) * 4,
                _ => (ln + 1) * 8,
            };
            if at + hlen > stop {
                return;
            }
            if nh == 44 && be16(at + 2) & 0xfff8 != 0 {
                s.proto = nx; // a later fragment: its protocol, no transport header
                return;
            }
            (nh, at) = (nx, at + hlen);
        }
        transport(s, b, at, stop, nh);
    }
}

/// The transport header of protocol `pr` at `at` (the datagram ending at `stop`): whole, its
/// payload's offset and its head.
fn transport(s: &mut Parsed, b: &[u8], at: usize, stop: usize, pr: u8) {
    s.proto = pr;
    s.l4 = at as u16;
    let room = stop.saturating_sub(at);
    let hl = match pr {
        6 => {
            if room < 20 {
                return;
            }
            let hl = usize::from(b[at + 12] >> 4) * 4;
            if hl < 20 {
                return;
            }
            hl
        }
        17 | 1 | 58 => 8,
        132 => 12,
        _ => return,
    };
    if room < hl {
        return;
    }
    s.l4ok = 1;
    s.pay = (at + hl) as u16;
    let k = match pr {
        17 => 1,
        6 => 2,
        132 => return,
        _ => 3,
    };
    s.heads[k] = b.as_ptr() as u64 + at as u64;
}

/// Recomputes the IPv4 header checksum and the UDP or TCP checksum of a packet a script changed
/// (not of fragments: their transport checksum covers bytes of other packets).
pub fn fix_checksums(b: &mut [u8], link: LinkType) {
    let p = wire::parse(b, link);
    let Some(l3) = p.l3.map(|o| o as usize) else {
        return;
    };
    if p.ip_version == 4 {
        let ihl = usize::from(b.get(l3).map_or(0, |v| v & 0xf)) * 4;
        if ihl >= 20 && l3 + ihl <= b.len() {
            b[l3 + 10..l3 + 12].fill(0);
            let c = wire::checksum::checksum(&b[l3..l3 + ihl]);
            b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
        }
    }
    let (Some(l4), true) = (p.l4.map(|o| o as usize), p.has_l4()) else {
        return;
    };
    if p.fragment.is_some() || !matches!(p.proto, 6 | 17) {
        return;
    }
    let end = (p.l3_end as usize).clamp(l4, b.len());
    let seg = &mut b[l4..end];
    let _ = if p.ip_version == 4 {
        let s = [p.src[0], p.src[1], p.src[2], p.src[3]];
        let d = [p.dst[0], p.dst[1], p.dst[2], p.dst[3]];
        wire::emit::fill_transport_checksum_v4(s, d, p.proto, seg)
    } else {
        wire::emit::fill_transport_checksum_v6(&p.src, &p.dst, p.proto, seg)
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::apps::lua::{new_state, ScriptOptions};
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    fn batch(frames: &[Vec<u8>]) -> Batch {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for f in frames {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
        }
        b
    }

    /// An Ethernet frame: optional VLAN tag, IPv4 or IPv6, UDP, with correct checksums.
    fn frame(vlan: Option<u16>, v6: bool, sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        if let Some(id) = vlan {
            f.extend_from_slice(&[0x81, 0, (id >> 8) as u8, id as u8]);
        }
        let udp = [
            (sport >> 8) as u8,
            sport as u8,
            (dport >> 8) as u8,
            dport as u8,
            0,
            12,
            0,
            0,
            b'a',
            b'b',
            b'c',
            b'd',
        ];
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 12, 17, 64]);
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb9].repeat(4));
        } else {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        }
        f.extend_from_slice(&udp);
        fix_checksums(&mut f, LinkType::ETHERNET);
        f
    }

    /// A slot's parse, its header addresses as offsets in its frame.
    fn parse_of(s: &Slot) -> Vec<u64> {
        let p = s.parse();
        let mut v: Vec<u64> = [p.parsed, p.ver, p.proto, p.nvl, p.l4ok]
            .iter()
            .map(|&c| u64::from(c))
            .collect();
        v.extend([p.l3, p.l4, p.l3e, p.pay].iter().map(|&c| u64::from(c)));
        v.extend(p.heads.iter().map(|&h| match h {
            0 => u64::MAX,
            h => h - s.addr.get(),
        }));
        v.extend([u64::from(s.len()), u64::from(s.stream()), u64::from(s.ok())]);
        v
    }

    /// gen's load (a frame after one of its stream and length takes that one's parse) finds
    /// what the parse of each frame finds: runs of one stream, streams changing, a length
    /// changing within a stream, VLAN, IPv6, a truncated frame.
    #[test]
    fn load_built_parses_as_load_mut() {
        let short = frame(None, false, 1, 2)[..30].to_vec();
        let mut long = frame(None, false, 5, 6);
        long.extend_from_slice(&[0; 20]);
        let frames = vec![
            frame(None, false, 1, 2),
            frame(None, false, 3, 4),
            long,
            frame(None, true, 1, 2),
            frame(None, true, 7, 8),
            frame(Some(5), false, 1, 2),
            frame(Some(6), false, 1, 2),
            short.clone(),
            short,
            frame(None, false, 9, 9),
        ];
        let streams = [0, 0, 0, 1, 1, 2, 2, 3, 3, 0];
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let pk = Packets::new(&lua, GEN, LinkType::ETHERNET).unwrap();
        let mut b = batch(&frames);
        assert_eq!(pk.load_mut(&mut b, &streams).unwrap(), frames.len());
        let want: Vec<_> = pk.shared.pkts[..frames.len()]
            .iter()
            .map(parse_of)
            .collect();
        pk.done();
        assert_eq!(pk.load_built(&mut b, &streams).unwrap(), frames.len());
        let got: Vec<_> = pk.shared.pkts[..frames.len()]
            .iter()
            .map(parse_of)
            .collect();
        assert_eq!(got, want);
        assert!(want[3][1] == 6 && want[5][3] == 1 && want[7][4] == 0);
        pk.done();
    }

    /// Runs the script's `f(pkts, n)` on `frames`; its result as text (`tostring`).
    fn run(
        src: &str,
        access: Access,
        frames: &[Vec<u8>],
    ) -> (mlua::Result<String>, Batch, Vec<bool>) {
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let pk = Packets::new(&lua, access, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let mut b = batch(frames);
        let n = if access.write {
            pk.load_mut(&mut b, &[]).unwrap()
        } else {
            pk.load(&b, &[]).unwrap()
        };
        let f: mlua::Function = lua.globals().get("f").unwrap();
        let r = f
            .call::<Value>((pk.table().clone(), n))
            .map(|v| v.to_string().unwrap_or_default());
        let dropped = (0..n).map(|i| pk.dropped(i)).collect();
        pk.store(&mut b, |_, d| fix_checksums(d, LinkType::ETHERNET));
        (r, b, dropped)
    }

    const GEN: Access = Access {
        tool: "gen",
        write: true,
        drop: false,
    };
    const BAL: Access = Access {
        tool: "balance",
        write: false,
        drop: true,
    };

    #[test]
    fn fields_by_name_read_what_the_headers_say_and_absent_layers_are_nil() {
        let src = r#"
            function f(pkts, n)
              local a, b = pkts[1], pkts[2]
              return table.concat({
                a.eth.src, a.eth.dst, string.format("%04x", a.eth.type), tostring(a.vlan),
                a.ip4.src, a.ip.dst, a.ip4.ttl, a.ip4.proto, a.udp.sport, a.udp.dport,
                tostring(a.tcp), tostring(a.ip6),
                b.vlan.id, string.format("%04x", b.eth.type), b.ip6.src, b.ip.version,
                b.ip6.hlim, b.ip6.proto, b.udp.dport, tostring(b.ip4)
              }, " ")
            end"#;
        let (r, _, _) = run(
            src,
            BAL,
            &[frame(None, false, 1000, 53), frame(Some(42), true, 7, 4789)],
        );
        assert_eq!(
            r.unwrap(),
            "02:00:00:00:00:01 02:00:00:00:00:02 0800 nil 10.0.0.1 10.0.0.2 64 17 1000 53 nil nil \
             42 86dd 2001:db8:2001:db8:2001:db8:2001:db8 6 64 17 4789 nil"
        );
    }

    #[test]
    fn assigned_fields_and_setters_change_the_packet_with_correct_checksums() {
        let src = r#"
            function f(pkts, n)
              pkts[1].udp.dport = 4242
              pkts[1].ip4.src = "192.0.2.9"
              pkts[1]:eth():setDst("aa:bb:cc:dd:ee:ff")
              pkts[2]:ip6():setDst(7)
              pkts[2].vlan.id = 100
              pkts[2]:udp():setSrcPort(9)
            end"#;
        let (r, b, _) = run(
            src,
            GEN,
            &[frame(None, false, 1000, 53), frame(Some(42), true, 7, 4789)],
        );
        r.unwrap();
        let want0 = {
            let mut f = frame(None, false, 1000, 4242);
            f[0..6].copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
            f[26..30].copy_from_slice(&[192, 0, 2, 9]);
            fix_checksums(&mut f, LinkType::ETHERNET);
            f
        };
        assert_eq!(b.data(0), &want0[..]);
        let p = wire::parse(b.data(1), LinkType::ETHERNET);
        assert_eq!(p.vlans(), &[100]);
        assert_eq!((p.sport, p.dport), (9, 4789));
        assert_eq!(&p.dst[12..], &[0, 0, 0, 7]);
        // the UDP checksum verifies: the sum over the pseudo-header and segment is 0xffff
        let l4 = p.l4.unwrap() as usize;
        let mut again = b.data(1).to_vec();
        let c = u16::from_be_bytes([again[l4 + 6], again[l4 + 7]]);
        fix_checksums(&mut again, LinkType::ETHERNET);
        assert_eq!(u16::from_be_bytes([again[l4 + 6], again[l4 + 7]]), c);
    }

    /// An Ethernet frame: IPv4 (protocol `proto`, fragment field `frag`) and the bytes `l4`
    /// after it, every checksum right ([`full`]).
    fn v4(proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let len = (20 + l4.len()) as u16;
        f.extend_from_slice(&[0x45, 0, (len >> 8) as u8, len as u8, 0x12, 0x34]);
        f.extend_from_slice(&[(frag >> 8) as u8, frag as u8, 64, proto, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(l4);
        full(&mut f);
        f
    }

    /// Every checksum recomputed from scratch: IPv4 header, UDP, TCP and ICMP.
    fn full(f: &mut [u8]) {
        fix_checksums(f, LinkType::ETHERNET);
        let p = wire::parse(f, LinkType::ETHERNET);
        if let (1, Some(l4), true) = (p.proto, p.l4, p.has_l4()) {
            let (l4, end) = (l4 as usize, (p.l3_end as usize).min(f.len()));
            f[l4 + 2..l4 + 4].fill(0);
            let c = wire::checksum::checksum(&f[l4..end]);
            f[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
        }
    }

    const TCP_HDR: [u8; 24] = [
        0x30, 0x39, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0x20, 0, 0, 0, 0, 0, b'a', b'b',
        b'c', b'd',
    ];
    const ICMP_HDR: [u8; 12] = [8, 0, 0, 0, 0, 1, 0, 1, b'p', b'i', b'n', b'g'];

    /// Runs gen's `f(pkts, n)` on `frames` with the setters' checksums `on` or off; the
    /// packets after it (nothing recomputed after the call) and those marked for the full
    /// recompute.
    fn run_marked(src: &str, frames: &[Vec<u8>], on: bool) -> (Batch, Vec<usize>) {
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let pk = Packets::new(&lua, GEN, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let mut b = batch(frames);
        let n = pk.load_mut(&mut b, &[]).unwrap();
        pk.set_checksums(on);
        let f: mlua::Function = lua.globals().get("f").unwrap();
        f.call::<()>((pk.table().clone(), n)).unwrap();
        // gen ends its batches on the word of marks, without a pass over the slots: the same
        // packets as the slots' own marks (read by `store`, which then clears them).
        let mut by_word = Vec::new();
        pk.end_written(&mut b, |i, _| by_word.push(i));
        let mut marked = Vec::new();
        pk.store(&mut b, |i, _| marked.push(i));
        assert_eq!(by_word, marked, "{src}");
        (b, marked)
    }

    #[test]
    fn field_writes_keep_every_checksum_right_without_a_recompute() {
        // Each field of ip4, udp, tcp and icmp written 300 times (interpreted, then compiled),
        // over IPv4 (UDP behind a VLAN tag, TCP, ICMP) and UDP over IPv6: after every round the
        // checksums are those a full recompute gives, and no packet is left for one.
        let src = r#"
            function f(pkts, n)
              for k = 1, 300 do
                local a, t, c, v = pkts[1], pkts[2], pkts[3], pkts[4]
                a.ip4.src = 0xc6120000 + k * 7919
                a.ip4.dst = "203.0.113." .. (k % 256)
                a.ip4.ttl = k % 256
                a.ip4.tos = (k * 3) % 256
                a.ip4.id = (k * 40503) % 65536
                a.udp.sport = (k * 2654435761) % 65536
                a:udp():setDstPort(k)
                t.ip4.saddr = 0xffffffff - k
                t:ip4():setDstNum(k * 16777216 % 4294967296)
                t.tcp.sport = k
                t.tcp.dport = 65535 - k
                t.tcp.seq = (k * 2654435761) % 4294967296
                t.tcp.ack = 0xffffffff - k
                t.tcp.flags = k % 512
                t.tcp.win = k * 200
                c.ip4.src = k
                c.icmp.type = k % 256
                c.icmp.code = (k * 5) % 256
                v.udp.sport = k
                v.udp.dport = 65535 - k * 3
                v.ip6.hlim = 1
              end
            end"#;
        let frames = [
            frame(Some(7), false, 1000, 53),
            v4(6, 0, &TCP_HDR),
            v4(1, 0, &ICMP_HDR),
            frame(None, true, 7, 4789),
        ];
        let (b, marked) = run_marked(src, &frames, true);
        // the IPv6 hop limit is not a fast field: that packet alone is marked
        assert_eq!(marked, [3]);
        for i in 0..3 {
            let mut want = b.data(i).to_vec();
            full(&mut want);
            assert_eq!(b.data(i), &want[..], "packet {i}");
        }
        let p = wire::parse(b.data(1), LinkType::ETHERNET);
        assert_eq!((p.sport, p.dport), (300, 65235));
        // the IPv6 packet's UDP checksum: its ports were kept right too
        let mut want = b.data(3).to_vec();
        full(&mut want);
        assert_eq!(b.data(3), &want[..]);
    }

    #[test]
    fn setter_checksums_follow_udp_zero_fragments_cut_packets_and_checksums_false() {
        let udp = |sport: u16, csum: u16| {
            let mut u = vec![(sport >> 8) as u8, sport as u8, 0, 53, 0, 12];
            u.extend_from_slice(&csum.to_be_bytes());
            u.extend_from_slice(b"abcd");
            u
        };
        // A UDP checksum 0 (none sent) stays 0; the IPv4 header checksum is still updated.
        let mut zero = v4(17, 0, &udp(1000, 0));
        zero[14 + 20 + 6..14 + 20 + 8].fill(0);
        let src = "function f(pkts, n) pkts[1].ip4.src = 0x0a000063 pkts[1].udp.sport = 99 end";
        let (b, marked) = run_marked(src, &[zero], true);
        assert!(marked.is_empty());
        let d = b.data(0);
        assert_eq!(&d[40..42], &[0, 0]);
        let mut want = d.to_vec();
        fix_checksums(&mut want, LinkType::ETHERNET);
        assert_eq!(&d[14..34], &want[14..34]);
        // A computed 0 is sent as 0xffff: the source port whose full checksum is 0xffff.
        let base = v4(17, 0, &udp(1000, 0));
        let sport = (0..=u16::MAX)
            .find(|&s| {
                let mut f = base.clone();
                f[34..36].copy_from_slice(&s.to_be_bytes());
                full(&mut f);
                f[40..42] == [0xff, 0xff]
            })
            .unwrap();
        let src = format!("function f(pkts, n) pkts[1].udp.sport = {sport} end");
        let (b, _) = run_marked(&src, std::slice::from_ref(&base), true);
        assert_eq!(&b.data(0)[40..42], &[0xff, 0xff]);
        // A later fragment has no transport header here: its bytes after the IPv4 header are
        // left as they are (the transport checksum is in the first fragment).
        let later = v4(17, 0x2000 | 3, &udp(1000, 0x1234));
        let src = "function f(pkts, n) pkts[1].ip4.dst = 0x0a0000fe end";
        let (b, marked) = run_marked(src, std::slice::from_ref(&later), true);
        assert!(marked.is_empty());
        let d = b.data(0);
        assert_eq!(&d[34..], &later[34..]);
        let mut want = d.to_vec();
        full(&mut want);
        assert_eq!(&d[14..34], &want[14..34]);
        // A cut packet (its IPv4 length says more than the frame holds): the checksums are
        // those of the whole packet, which a recompute of the cut one cannot give.
        let whole = v4(17, 0, &[udp(1000, 0), vec![7; 100]].concat());
        let whole = {
            let mut w = whole;
            w[38..40].copy_from_slice(&112u16.to_be_bytes());
            full(&mut w);
            w
        };
        let cut = whole[..60].to_vec();
        let src = "function f(pkts, n) pkts[1].ip4.src = 0xc0000201 pkts[1].udp.dport = 4242 end";
        let (b, marked) = run_marked(src, &[cut], true);
        assert!(marked.is_empty());
        let mut want = whole.clone();
        want[26..30].copy_from_slice(&[192, 0, 2, 1]);
        want[36..38].copy_from_slice(&4242u16.to_be_bytes());
        full(&mut want);
        assert_eq!(b.data(0), &want[..60]);
        // checksums = false: the fields are written, the checksums left as they were.
        let f0 = frame(None, false, 1000, 53);
        let (b, marked) = run_marked(src, std::slice::from_ref(&f0), false);
        assert!(marked.is_empty());
        let d = b.data(0);
        assert_eq!(&d[26..30], &[192, 0, 2, 1]);
        assert_eq!((&d[24..26], &d[40..42]), (&f0[24..26], &f0[40..42]));
    }

    #[test]
    fn raw_writes_and_structural_fields_mark_the_packet_for_the_full_recompute() {
        let cases = [
            ("p:setU16(42, 7)", true),
            ("p:setByte(14, 0x45)", true),
            ("p.eth.src = 'aa:bb:cc:dd:ee:ff'", true),
            ("p.ip4.len = 32", true),
            ("p.ip4.proto = 17", true),
            ("p.udp.len = 12", true),
            ("p.udp.checksum = 1", true),
            ("p.ip4.ttl = 9", false),
            ("p.udp.dport = 9", false),
            ("local _ = p.ip4.src .. p.udp.sport", false),
        ];
        for (code, want) in cases {
            let src = format!("function f(pkts, n) local p = pkts[1] {code} end");
            let (_, marked) = run_marked(&src, &[frame(None, false, 1000, 53)], true);
            assert_eq!(marked == [0], want, "{code}");
        }
    }

    #[test]
    fn values_from_2_to_the_31_keep_their_low_byte_interpreted_and_compiled() {
        // 0xfeedf00d and 0xc6120001 do not fit an int32: every byte must still land, also in
        // a loop the compiler has traced (200 rounds over the same packet).
        let src = r#"
            function f(pkts, n)
              for k = 1, 200 do
                local p = pkts[1]
                p:setU32(42, 0xfeedf00d)
                p.ip4.src = 0xc6120000 + k
                p.ip4.daddr = 0xffffffff
              end
            end"#;
        let (r, b, _) = run(src, GEN, &[frame(None, false, 1000, 53)]);
        r.unwrap();
        let d = b.data(0);
        assert_eq!(&d[42..46], &[0xfe, 0xed, 0xf0, 0x0d]);
        assert_eq!(&d[26..30], &[0xc6, 0x12, 0, 200]);
        assert_eq!(&d[30..34], &[0xff; 4]);
    }

    #[test]
    fn read_only_tools_refuse_writes_and_bad_input_is_an_error_naming_it() {
        let cases = [
            (
                "pkts[1].udp.dport = 1",
                "pkt.udp.dport: packets are read-only in balance",
            ),
            (
                "pkts[1]:setU16(0, 1)",
                "setU16: packets are read-only in balance",
            ),
            (
                "return pkts[1].udp.nope",
                "no such field (pkt.udp has sport",
            ),
            ("return pkts[1]:getU32(44)", "past the end of a 46 B packet"),
            (
                "return pkts[3]:len()",
                "pkts[3] is not part of this batch of 2",
            ),
        ];
        for (body, want) in cases {
            let src = format!("function f(pkts, n)\n  {body}\nend");
            let (r, _, _) = run(
                &src,
                BAL,
                &[frame(None, false, 1, 2), frame(None, false, 3, 4)],
            );
            let e = r.unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let bad = [
            (
                "pkts[1].udp.dport = 70000",
                "pkt.udp.dport: a number from 0 to 65535",
            ),
            ("pkts[1].ip4.src = '2001:db8::1'", "is not an IPv4 address"),
            ("pkts[1].ip4.proto = -1", "a number from 0 to 255"),
            ("pkts[1]:setByte(0, 256)", "does not fit in 1 byte"),
            ("pkts[1]:drop()", "gen scripts do not drop packets"),
            ("pkts[1].ip6.src = '::1'", "'ip6' (a nil value)"),
        ];
        for (body, want) in bad {
            let src = format!("function f(pkts, n)\n  {body}\nend");
            let (r, _, _) = run(&src, GEN, &[frame(None, false, 1, 2)]);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn values_of_2_31_and_more_are_written_whole() {
        let src = r#"
            function f(pkts, n)
              pkts[1]:setU32(42, 0xfeedf00d)
              pkts[1].ip4.saddr = 0xc0000281
              pkts[1].eth.smac = 0x02000000ffee
            end"#;
        let (r, b, _) = run(src, GEN, &[frame(None, false, 1000, 53)]);
        r.unwrap();
        let d = b.data(0);
        assert_eq!(&d[42..46], &[0xfe, 0xed, 0xf0, 0x0d]);
        assert_eq!(&d[26..30], &[192, 0, 2, 0x81]);
        assert_eq!(&d[6..12], &[2, 0, 0, 0, 0xff, 0xee]);
    }

    #[test]
    fn drops_are_per_packet_and_forgotten_at_the_next_batch() {
        let src = "function f(pkts, n)\n  for i = 1, n do if pkts[i].udp.dport == 53 then pkts[i]:drop() end end\nend";
        let (r, _, dropped) = run(
            src,
            BAL,
            &[
                frame(None, false, 1, 53),
                frame(None, true, 3, 4),
                frame(Some(5), false, 1, 53),
            ],
        );
        r.unwrap();
        assert_eq!(dropped, [true, false, true]);
        // The next batch starts with nothing dropped.
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let pk = Packets::new(&lua, BAL, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let b = batch(&[frame(None, false, 1, 53), frame(None, false, 1, 54)]);
        let f: mlua::Function = lua.globals().get("f").unwrap();
        for _ in 0..2 {
            let n = pk.load(&b, &[]).unwrap();
            assert!(!pk.dropped(0) && !pk.dropped(1));
            f.call::<()>((pk.table().clone(), n)).unwrap();
            assert!(pk.dropped(0) && !pk.dropped(1));
            pk.done();
        }
    }

    #[test]
    fn drops_end_a_batch_and_the_next_load_clears_the_slots_it_does_not_reuse() {
        let fwd = Access {
            tool: "fwd",
            write: false,
            drop: true,
        };
        let src = "function f(pkts, n)\n  kept = pkts\n  if n == 3 then held = pkts[3].udp end\n  \
                   for i = 1, n do if pkts[i].udp.dport == 53 then pkts[i]:drop() end end\nend\n\
                   function port(i) return kept[i].udp.dport end\n\
                   function old() return held.dport end";
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let pk = Packets::new(&lua, fwd, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let g = |name: &str| -> mlua::Function { lua.globals().get(name).unwrap() };
        let three = batch(&[
            frame(None, false, 1, 53),
            frame(None, false, 1, 54),
            frame(None, false, 1, 53),
        ]);
        let n = pk.load(&three, &[]).unwrap();
        g("f").call::<()>((pk.table().clone(), n)).unwrap();
        assert_eq!(pk.drops(), 0b101);
        let two = batch(&[frame(None, false, 1, 54), frame(None, false, 1, 53)]);
        let n = pk.load(&two, &[]).unwrap();
        // The third slot, left by the first batch, is empty: neither the packet nor a view
        // of it taken then reaches its frame.
        assert_eq!(g("port").call::<u16>(2).unwrap(), 53);
        let e = g("port").call::<u16>(3).unwrap_err().to_string();
        assert!(e.contains("pkts[3] is not part of this batch of 2"), "{e}");
        assert!(g("old").call::<u16>(()).is_err());
        g("f").call::<()>((pk.table().clone(), n)).unwrap();
        assert_eq!(pk.drops(), 0b10);
        // done: no slot points at the batch any more.
        pk.done();
        assert!(g("port").call::<u16>(1).is_err());
        let n = pk.load(&two, &[]).unwrap();
        assert_eq!((n, pk.drops()), (2, 0));
    }
}

#[cfg(all(test, not(loom)))]
mod views {
    use super::*;
    use crate::apps::lua::{error_line, new_state, ScriptOptions};
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    #[test]
    fn errors_name_the_script_and_line_and_nothing_outside_the_frame_is_reached() {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        let mut fr = b.alloc().unwrap();
        fr.buf()[..4].copy_from_slice(&[1, 2, 3, 4]);
        fr.push(Desc {
            len: 4,
            wire_len: 4,
            ..Default::default()
        });
        let cases = [
            (
                "pkts[1]:setU32(1, 7)",
                "t.lua:3: setU32: offset 1+4 is past the end of a 4 B packet",
            ),
            (
                "pkts[1]:getByte(-1)",
                "t.lua:3: getByte: offset -1+1 is past the end",
            ),
            (
                "pkts[1]:bytes(2, 3)",
                "t.lua:3: bytes: offset 2+3 is past the end",
            ),
            (
                "pkts[1].udp.dport = 1",
                "t.lua:3: attempt to index field 'udp' (a nil value)",
            ),
            (
                "pkts[2]:len()",
                "t.lua:3: pkts[2] is not part of this batch of 1",
            ),
            // A packet is a pointer to an incomplete C struct: it cannot be indexed by
            // number, moved by arithmetic, nor its methods called on anything else.
            (
                "pkts[1][1] = -5 ; pkts[1]:len()",
                "t.lua:3: size of C type is unknown",
            ),
            (
                "local q = pkts[1] + 1 ; q:len()",
                "t.lua:3: attempt to perform arithmetic on 'struct lr_view *'",
            ),
            ("pkts[1].len({})", "t.lua:3: not a packet of this batch"),
            (
                "pkts[1]:getU16('1')",
                "t.lua:3: getU16: the offset is a whole number (from 0), not 1",
            ),
            (
                "pkts[1]:getByte(1.5)",
                "t.lua:3: getByte: the offset is a whole number (from 0), not 1.5",
            ),
            (
                "pkts[1]:setByte(0/0, 1)",
                "t.lua:3: setByte: the offset is a whole number (from 0), not nan",
            ),
            (
                "pkts[1]:bytes(0, 1/0)",
                "t.lua:3: bytes: the length is a whole number from 0, not inf",
            ),
            (
                "pkts[1]:bytes(3, 0.5)",
                "t.lua:3: bytes: the length is a whole number from 0, not 0.5",
            ),
            ("return ffi or require", "t.lua:3:"),
        ];
        for (body, want) in cases {
            let lua = new_state(&ScriptOptions::default()).unwrap();
            let pk = Packets::new(
                &lua,
                Access {
                    tool: "gen",
                    write: true,
                    drop: false,
                },
                LinkType::ETHERNET,
            )
            .unwrap();
            let src = format!("function f(pkts, n)\n  local x = 1\n  {body}\nend");
            lua.load(&src).set_name("@t.lua").exec().unwrap();
            let f: mlua::Function = lua.globals().get("f").unwrap();
            let n = pk.load_mut(&mut b, &[]).unwrap();
            let r = f.call::<Value>((pk.table().clone(), n));
            pk.store(&mut b, |_, _| {});
            if body.starts_with("return ffi") {
                // Scripts do not get the FFI: `ffi` is nil, require("ffi") fails.
                assert!(matches!(r.unwrap(), Value::Function(_)));
                let e = lua.load("return require('ffi')").exec().unwrap_err();
                assert!(e.to_string().contains("module 'ffi' not found"), "{e}");
                continue;
            }
            let e = r.unwrap_err();
            let m = error_line(&e, "t.lua", &lua);
            assert!(m.starts_with(want), "{body}: {m}");
            assert_eq!(b.data(0), &[1, 2, 3, 4]);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod layers {
    use super::*;
    use crate::apps::lua::{new_state, ScriptOptions};
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    /// Runs `f(pkts, n)` (read-only) over `frames`; its result as text.
    fn eval(src: &str, frames: &[Vec<u8>]) -> String {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for f in frames {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
        }
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let access = Access {
            tool: "fwd",
            write: false,
            drop: true,
        };
        let pk = Packets::new(&lua, access, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let f: mlua::Function = lua.globals().get("f").unwrap();
        let n = pk.load(&b, &[]).unwrap();
        let r: String = f.call((pk.table().clone(), n)).unwrap();
        pk.done();
        r
    }

    fn eth(tags: &[(u16, u16)], et: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for &(tpid, id) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
        }
        f.extend_from_slice(&et.to_be_bytes());
        f
    }

    fn v6(ext: &[u8], first: u8, frag_off: Option<u16>) -> Vec<u8> {
        let mut f = eth(&[], 0x86dd);
        let mut body = ext.to_vec();
        if let Some(off) = frag_off {
            body.extend_from_slice(&[17, 0]);
            body.extend_from_slice(&off.to_be_bytes());
            body.extend_from_slice(&[0, 0, 0, 9]);
        }
        body.extend_from_slice(&[0x10, 0x00, 0x00, 0x35, 0, 8, 0, 0]);
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(body.len() as u16).to_be_bytes());
        f.extend_from_slice(&[first, 64]);
        f.extend_from_slice(&[0; 15]);
        f.push(1);
        f.extend_from_slice(&[0; 15]);
        f.push(2);
        f.extend_from_slice(&body);
        f
    }

    /// The parse Rust does as it fills the slots (parse_frame) and packets.lua's, which runs
    /// after a raw write, find the same layers in every kind of packet.
    #[test]
    fn the_rust_and_the_lua_parse_agree() {
        let mut frames = Vec::new();
        let mut qinq = eth(&[(0x88a8, 0x2005), (0x8100, 7)], 0x0800);
        qinq.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 1, 0x20, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        qinq.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
        frames.push(qinq);
        let mut frag4 = eth(&[], 0x0800);
        frag4.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 1, 0, 1, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        frag4.extend_from_slice(&[0x10, 0, 0, 0x35, 0, 8, 0, 0]);
        frames.push(frag4.clone());
        frames.push(frag4[..30].to_vec()); // cut in the IPv4 header
        let mut tcp = eth(&[(0x8100, 3)], 0x0800);
        tcp.extend_from_slice(&[
            0x45, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        tcp.extend_from_slice(&[0, 80, 0, 81, 0, 0, 0, 1, 0, 0, 0, 2, 0x50, 0x12, 1, 0]);
        tcp.extend_from_slice(&[0, 0, 0, 0]);
        frames.push(tcp.clone());
        let mut short_hl = tcp.clone();
        short_hl[18 + 20 + 12] = 0x40; // data offset 16 B: no TCP header
        frames.push(short_hl);
        let mut ah = eth(&[], 0x0800);
        ah.extend_from_slice(&[
            0x45, 0, 0, 48, 0, 1, 0, 0, 64, 51, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        ah.extend_from_slice(&[17, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        ah.extend_from_slice(&[0x10, 0, 0, 0x35, 0, 8, 0, 0]);
        frames.push(ah);
        frames.push(v6(&[17, 0, 1, 4, 0, 0, 0, 0], 0, None));
        frames.push(v6(&[], 44, Some(1)));
        frames.push(v6(&[], 44, Some(8)));
        frames.push(v6(&[], 58, None));
        frames.push(v6(&[], 59, None));
        frames.push(eth(&[], 0x0806));
        frames.push(eth(&[(0x8100, 1); 5], 0x0800));
        frames.push(vec![1, 2, 3]);
        let src = r#"
            local function sig(p)
              local r = {}
              for _, l in ipairs({ "eth", "vlan", "ip4", "ip6", "udp", "tcp", "icmp", "ip" }) do
                r[#r + 1] = tostring(p[l] ~= nil)
              end
              if p.ip4 then r[#r + 1] = p.ip4.proto end
              if p.ip6 then r[#r + 1] = p.ip6.proto end
              if p.vlan then r[#r + 1] = p.vlan.id end
              if p.eth then r[#r + 1] = p.eth.type end
              if p.udp then r[#r + 1] = p.udp.dport end
              if p.tcp then r[#r + 1] = p.tcp.flags end
              if p.icmp then r[#r + 1] = p.icmp.type end
              r[#r + 1] = tostring(select(2, pcall(p.payloadOffset, p)))
              return table.concat(r, " ")
            end
            function f(pkts, n)
              local bad = {}
              for i = 1, n do
                local p = pkts[i]
                local a = sig(p)
                if p:len() > 0 then p:setByte(0, p:getByte(0)) end -- parsed again, in Lua
                local b = sig(p)
                if a ~= b then bad[#bad + 1] = i .. ": " .. a .. " / " .. b end
              end
              return table.concat(bad, "; ")
            end"#;
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for f in &frames {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
        }
        let lua = new_state(&ScriptOptions::default()).unwrap();
        let access = Access {
            tool: "gen",
            write: true,
            drop: false,
        };
        let pk = Packets::new(&lua, access, LinkType::ETHERNET).unwrap();
        lua.load(src).exec().unwrap();
        let f: mlua::Function = lua.globals().get("f").unwrap();
        let n = pk.load_mut(&mut b, &[]).unwrap();
        let r: String = f.call((pk.table().clone(), n)).unwrap();
        pk.store(&mut b, |_, _| {});
        assert_eq!(r, "");
    }

    #[test]
    fn tags_extension_headers_and_fragments_follow_the_parsers_rules() {
        // QinQ: the outer tag's id, the ethertype after both tags.
        let mut qinq = eth(&[(0x88a8, 0x2005), (0x8100, 7)], 0x0800);
        qinq.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 1, 0x20, 0, 64, 1, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        qinq.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]);
        // IPv4, a later fragment (offset 8): no transport layer.
        let mut frag4 = eth(&[], 0x0800);
        frag4.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 1, 0, 1, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        frag4.extend_from_slice(&[0x10, 0, 0, 0x35, 0, 8, 0, 0]);
        // IPv6: Hop-by-Hop then UDP; first fragment then UDP; a later fragment.
        let hbh = v6(&[17, 0, 1, 4, 0, 0, 0, 0], 0, None);
        let first = v6(&[], 44, Some(1));
        let later = v6(&[], 44, Some(8));
        let src = r#"
            function f(pkts, n)
              local r = {}
              local q = pkts[1]
              r[#r + 1] = table.concat({ q.vlan.id, q.vlan.pcp, string.format("%04x", q.vlan.tpid),
                string.format("%04x", q.eth.type), q.ip4.src, q.ip4.saddr, tostring(q.udp),
                q.icmp.type, q.ip.version }, " ")
              local g = pkts[2]
              r[#r + 1] = table.concat({ tostring(g.vlan), g.ip4.proto, tostring(g.udp),
                tostring(g.ip4 ~= nil) }, " ")
              for i = 3, 5 do
                local p = pkts[i]
                r[#r + 1] = table.concat({ p.ip6.next, p.ip6.proto, p.ip6.dst,
                  tostring(p.udp and p.udp.dport) }, " ")
              end
              return table.concat(r, " | ")
            end"#;
        assert_eq!(
            eval(src, &[qinq, frag4, hbh, first, later]),
            "5 1 88a8 0800 10.0.0.1 167772161 nil 8 4 | nil 17 nil true | \
             0 17 ::2 53 | 44 17 ::2 53 | 44 17 ::2 nil"
        );
    }

    /// What a slot holds after a parse: the parse's fields and, for each header packets.lua's
    /// views read through, its offset in the frame (0: none).
    fn parse_state(s: &Slot) -> [u64; 13] {
        let base = s.addr.get();
        let p = s.parse();
        let head = |k: usize| match p.heads[k] {
            0 => 0,
            h => h.wrapping_sub(base).wrapping_add(1),
        };
        [
            u64::from(p.parsed),
            u64::from(p.ver),
            u64::from(p.proto),
            u64::from(p.nvl),
            u64::from(p.l4ok),
            u64::from(p.l3),
            u64::from(p.l4),
            u64::from(p.l3e),
            u64::from(p.pay),
            head(0),
            head(1),
            head(2),
            head(3),
        ]
    }

    /// Malformed frames of every kind: the slots parse_frame fills (as the frames are loaded)
    /// hold what packets.lua's `parse` (run again after a raw write) writes into them, field by
    /// field, on Ethernet and on raw IP: empty to 14-byte frames, VLAN/QinQ stacks cut after
    /// each byte, IPv4 IHL 0-4 or past the frame, total lengths below the header, AH chains
    /// cut, TCP data offsets 0-15, IPv6 extension header chains cut at every byte, 9000-byte
    /// jumbo frames.
    #[test]
    fn the_rust_and_the_lua_parse_agree_on_malformed_frames() {
        fn ip4(proto: u8, ihl: u8, total: Option<u16>, body: &[u8]) -> Vec<u8> {
            let total = total.unwrap_or((usize::from(ihl) * 4 + body.len()) as u16);
            let mut h = vec![0x40 | ihl, 0];
            h.extend_from_slice(&total.to_be_bytes());
            h.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
            h.resize(h.len().max(usize::from(ihl) * 4), 1);
            h.extend_from_slice(body);
            h
        }
        fn tcp(doff: u8, pad: usize) -> Vec<u8> {
            let mut t = vec![0, 80, 0, 81, 0, 0, 0, 1, 0, 0, 0, 2, doff << 4, 0x12, 1, 0];
            t.extend_from_slice(&[0, 0, 0, 0]);
            t.resize(t.len() + pad, 7);
            t
        }
        let udp = [0x10, 0, 0, 0x35, 0, 8, 0, 0];
        let join = |a: &[u8], b: &[u8]| [a, b].concat();
        let mut ip_frames: Vec<Vec<u8>> = Vec::new(); // from the IP header on
        for ihl in 0..16 {
            ip_frames.push(ip4(17, ihl, None, &udp));
        }
        for total in [0u16, 1, 19, 20, 27, 28, 29, 65535] {
            ip_frames.push(ip4(17, 5, Some(total), &udp));
        }
        for doff in 0..16 {
            ip_frames.push(ip4(6, 5, None, &tcp(doff, 40)));
            ip_frames.push(ip4(6, 5, Some(40), &tcp(doff, 40)));
        }
        let ah = [17, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
        ip_frames.push(ip4(51, 5, None, &join(&ah, &udp)));
        ip_frames.push(ip4(51, 5, None, &[51, 255, 0, 0]));
        for k in 0..6 {
            let chain: Vec<u8> = (0..k).flat_map(|_| [51, 0, 0, 0, 0, 0, 0, 0]).collect();
            ip_frames.push(ip4(51, 5, None, &join(&chain, &udp)));
        }
        let mut frag = ip4(17, 5, None, &udp);
        frag[7] = 1; // a later fragment
        ip_frames.push(frag);
        ip_frames.push(ip4(1, 5, None, &[8, 0, 0, 0, 0, 1, 0]));
        // IPv4 with options, AH then TCP, cut at every byte.
        let opts = ip4(6, 7, None, &join(&ah, &tcp(6, 4)));
        let mut cut4 = opts.clone();
        cut4[9] = 51;
        for whole in [opts, cut4] {
            for cut in 0..whole.len() {
                ip_frames.push(whole[..cut].to_vec());
            }
        }
        let jumbo = ip4(17, 5, None, &join(&udp, &[9; 9000 - 14 - 28]));
        ip_frames.push(jumbo);
        // IPv6, from its header on: extension header chains of every kind, cut at every byte.
        let hbh = [17, 0, 1, 4, 0, 0, 0, 0];
        let mut chains = vec![
            (0u8, join(&hbh, &udp)),
            (43, join(&[44, 255, 0, 0, 0, 0, 0, 0], &udp)),
            (
                60,
                join(&[60, 0, 0, 0, 0, 0, 0, 0], &[59, 0, 0, 0, 0, 0, 0, 0]),
            ),
            (44, join(&[17, 0, 0, 8, 0, 0, 0, 1], &udp)),
            (44, join(&[17, 0, 0, 1, 0, 0, 0, 1], &udp)),
            (51, join(&[6, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &tcp(5, 0))),
            (58, vec![128, 0, 0, 0, 0, 1, 0, 1]),
            (132, vec![0; 12]),
            (6, tcp(4, 0)),
            (0, (0..9).flat_map(|_| [0, 0, 0, 0, 0, 0, 0, 0]).collect()),
        ];
        chains.push((17, join(&udp, &[9; 9000 - 14 - 48])));
        let v6h = |nh: u8, plen: u16| {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&plen.to_be_bytes());
            h.extend_from_slice(&[nh, 64]);
            h.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            h.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            h
        };
        for (nh, body) in &chains {
            let whole = join(&v6h(*nh, body.len() as u16), body);
            for cut in 0..=whole.len().min(40 + 64) {
                ip_frames.push(whole[..cut].to_vec());
            }
            ip_frames.push(whole.clone());
            for plen in [0u16, 1, 4, 8, 60000] {
                ip_frames.push(join(&v6h(*nh, plen), body));
            }
        }
        let mut frames: Vec<Vec<u8>> = Vec::new();
        let v4 = ip4(17, 5, None, &udp);
        for cut in 0..=14 {
            frames.push(join(&eth(&[], 0x0800), &v4)[..cut].to_vec());
        }
        let qinq = join(&eth(&[(0x88a8, 5), (0x8100, 7)], 0x0800), &v4);
        for cut in 12..30 {
            frames.push(qinq[..cut].to_vec());
        }
        for k in 0..7 {
            let tags: Vec<(u16, u16)> = (0..k)
                .map(|i| ([0x8100, 0x88a8, 0x9100][i % 3], 1))
                .collect();
            frames.push(join(&eth(&tags, 0x0800), &v4));
            frames.push(eth(&tags, 0x8100));
        }
        for f in &ip_frames {
            let et = if f.first().is_some_and(|&v| v >> 4 == 6) {
                0x86dd
            } else {
                0x0800
            };
            frames.push(join(&eth(&[], et), f));
            frames.push(join(&eth(&[(0x8100, 3)], et ^ 0x86dd ^ 0x0800), f)); // the other family
        }
        let src = r#"
            function f(pkts, n)
              for i = 1, n do
                local p = pkts[i]
                if p:len() > 0 then p:setByte(0, p:getByte(0)) end -- parsed again, in Lua
                pcall(p.payloadOffset, p)
              end
            end"#;
        let config = PoolConfig {
            frame_size: 16384,
            frames: 256,
            ..Default::default()
        };
        let pool = Arc::new(Pool::new(&config).unwrap());
        for (link, frames) in [(LinkType::ETHERNET, &frames), (LinkType::RAW, &ip_frames)] {
            let lua = new_state(&ScriptOptions::default()).unwrap();
            let access = Access {
                tool: "gen",
                write: true,
                drop: false,
            };
            let pk = Packets::new(&lua, access, link).unwrap();
            lua.load(src).exec().unwrap();
            let f: mlua::Function = lua.globals().get("f").unwrap();
            for (c, chunk) in frames.chunks(BATCH).enumerate() {
                let mut b = Batch::with_pool(&pool);
                for fr in chunk {
                    let mut d = b.alloc().unwrap();
                    d.buf()[..fr.len()].copy_from_slice(fr);
                    d.push(Desc {
                        len: fr.len() as u32,
                        wire_len: fr.len() as u32,
                        ..Default::default()
                    });
                }
                let n = pk.load_mut(&mut b, &[]).unwrap();
                let rust: Vec<_> = pk.shared.pkts[..n].iter().map(parse_state).collect();
                f.call::<()>((pk.table().clone(), n)).unwrap();
                for (i, s) in pk.shared.pkts[..n].iter().enumerate() {
                    let fr = &chunk[i];
                    assert_eq!(
                        rust[i],
                        parse_state(s),
                        "{link:?} frame {}: {fr:02x?}",
                        c * BATCH + i
                    );
                }
                pk.store(&mut b, |_, _| {});
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod fast {
    use super::tests_support::*;
    use super::*;

    #[test]
    fn a_layer_view_kept_past_its_call_sees_the_next_batch_or_is_an_error() {
        let lua = new_lua();
        let pk = Packets::new(&lua, GEN_ACCESS, LinkType::ETHERNET).unwrap();
        lua.load(
            "function keep(pkts) V, W = pkts[1].udp, pkts[1].ip4 end\n\
             function read() collectgarbage() collectgarbage() return V.dport end\n\
             function raw(pkts) pkts[1]:setU16(12, 0x86dd) return V.dport end",
        )
        .set_name("@k.lua")
        .exec()
        .unwrap();
        let g = lua.globals();
        let call = |name: &str, b: &mut Batch| {
            pk.load_mut(b, &[]).unwrap();
            let f: mlua::Function = g.get(name).unwrap();
            let r = f.call::<Value>(pk.table().clone());
            pk.store(b, |_, _| {});
            r
        };
        let mut b = one(udp_frame(53));
        call("keep", &mut b).unwrap();
        // between calls: an error, nothing read
        let read: mlua::Function = g.get("read").unwrap();
        let e = read.call::<Value>(()).unwrap_err().to_string();
        assert!(
            e.contains("pkt.udp.dport: pkts[1] is not part of this batch"),
            "{e}"
        );
        // at the next call: the packet of that batch
        let mut b2 = one(udp_frame(4789));
        let r = call("read", &mut b2).unwrap();
        assert_eq!(r.as_i64(), Some(4789));
        // a raw write that takes the header away: the view says so
        let e = call("raw", &mut b2).unwrap_err().to_string();
        assert!(
            e.contains("pkt.udp.dport: pkts[1] has no udp header"),
            "{e}"
        );
        // Views are not pointers the script can move or index, nor can a method be handed an
        // address or another layer's view.
        for (body, want) in [
            ("return V[0]", "size of C type is unknown"),
            ("return V + 1", "attempt to perform arithmetic"),
            ("return W[-3]", "size of C type is unknown"),
            (
                "V.setSrcPort(4096, 1)",
                "pkt.udp:setSrcPort: call it on the layer",
            ),
            (
                "return V.getDstPort(0x7fff0000)",
                "pkt.udp:getDstPort: call it on the layer",
            ),
            (
                "return W.getSrcNum(V)",
                "pkt.ip4:getSrcNum: call it on the layer",
            ),
            (
                "W.setDstNum(V, 1)",
                "pkt.ip4:setDstNum: call it on the layer",
            ),
        ] {
            lua.load(format!("function bad() {body} end"))
                .exec()
                .unwrap();
            let f: mlua::Function = g.get("bad").unwrap();
            pk.load_mut(&mut b2, &[]).unwrap();
            let e = f.call::<Value>(()).unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
            pk.store(&mut b2, |_, _| {});
        }
    }
}

#[cfg(all(test, not(loom)))]
mod packet_views {
    use super::tests_support::*;
    use super::*;

    #[test]
    fn a_packet_is_an_ffi_view_of_its_slot_kept_or_not() {
        let lua = new_lua();
        let pk = Packets::new(&lua, GEN_ACCESS, LinkType::ETHERNET).unwrap();
        lua.load(
            "function keep(pkts) P = pkts[1] return type(P) .. ' ' .. tostring(P) .. ' ' \
               .. tostring(pkts[1].udp) .. ' ' .. tostring(rawequal(P, pkts[1])) end\n\
             function read() return P.udp end\n\
             function again(pkts)\n\
               local s = 0\n\
               for _ = 1, 300 do s = s + P.udp.dport + P:len() + (P.ip.ttl or 0) end\n\
               return tostring(rawequal(P, pkts[1])) .. ' ' .. s\n\
             end",
        )
        .set_name("@k.lua")
        .exec()
        .unwrap();
        let g = lua.globals();
        let call = |name: &str, b: &mut Batch| {
            pk.load_mut(b, &[]).unwrap();
            let f: mlua::Function = g.get(name).unwrap();
            let r = f.call::<Value>(pk.table().clone());
            pk.store(b, |_, _| {});
            r.map(|v| v.to_string().unwrap_or_default())
        };
        let mut b = one(udp_frame(53));
        assert_eq!(
            call("keep", &mut b).unwrap(),
            "cdata pkts[1] pkts[1].udp true"
        );
        // between calls: an error naming the packet, nothing read
        let read: mlua::Function = g.get("read").unwrap();
        let e = read.call::<Value>(()).unwrap_err().to_string();
        assert!(e.contains("pkts[1] is not part of this batch of 1"), "{e}");
        // at the next call, compiled: the packet of that batch, the same object
        let mut b2 = one(udp_frame(4789));
        let len = b2.data(0).len();
        let ttl = usize::from(b2.data(0)[22]);
        assert_eq!(
            call("again", &mut b2).unwrap(),
            format!("true {}", 300 * (4789 + len + ttl))
        );
    }
}

#[cfg(all(test, not(loom)))]
mod fast_parse {
    use super::*;

    fn fields(p: &Parsed, base: u64) -> [u64; 13] {
        let head = |h: u64| if h == 0 { 0 } else { h - base + 1 };
        [
            p.parsed.into(),
            p.ver.into(),
            p.proto.into(),
            p.nvl.into(),
            p.l4ok.into(),
            p.l3.into(),
            p.l4.into(),
            p.l3e.into(),
            p.pay.into(),
            head(p.heads[0]),
            head(p.heads[1]),
            head(p.heads[2]),
            head(p.heads[3]),
        ]
    }

    /// The common frame's short cut (untagged Ethernet, IPv4 without options, UDP) finds what
    /// the full parse finds, for every value of every header byte it looks at and every length
    /// around the headers'.
    #[test]
    fn the_short_cut_finds_what_the_full_parse_finds() {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[
            0x45, 0, 0, 46, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x04, 0x00, 0, 53, 0, 26, 0, 0]);
        f.resize(60, 7);
        let check = |b: &[u8], eth: bool| {
            let mut full = Parsed {
                parsed: 1,
                ..Default::default()
            };
            parse_layers(&mut full, b, eth);
            let base = b.as_ptr() as u64;
            assert_eq!(
                fields(&parse_frame(b, eth), base),
                fields(&full, base),
                "{b:02x?}"
            );
        };
        for at in 12..42 {
            for v in [
                0u8, 1, 5, 6, 8, 0x11, 0x1f, 0x20, 0x2e, 0x40, 0x45, 0x46, 0x86, 0xdd, 0xff,
            ] {
                let mut g = f.clone();
                g[at] = v;
                for cut in [41, 42, 43, 60] {
                    check(&g[..cut], true);
                    check(&g[..cut], false);
                }
            }
        }
        for total in 0..=80u16 {
            let mut g = f.clone();
            g[16..18].copy_from_slice(&total.to_be_bytes());
            check(&g, true);
        }
        // Longer than the slots' offsets: left to the Lua side.
        let big = vec![0u8; 70000];
        assert_eq!(parse_frame(&big, true).parsed, 0);
    }

    /// A read-only tool's batch (balance, fwd): the slots written as the batch is loaded, the
    /// common frame's straight into the slot, hold what the parse finds, common frame or not.
    #[test]
    fn the_slots_of_a_loaded_batch_hold_what_the_parse_finds() {
        let f = super::tests_support::udp_frame(53);
        let mut frames = Vec::new();
        for (at, v) in [
            (12, 8),
            (14, 0x46),
            (17, 30),
            (17, 200),
            (20, 0x20),
            (23, 6),
        ] {
            let mut g = f.clone();
            g[at] = v;
            frames.push(g.clone());
            frames.push(g[..41].to_vec());
        }
        frames.extend([f.clone(), f[..42].to_vec(), f[..20].to_vec()]);
        let lua = super::tests_support::new_lua();
        let access = Access {
            tool: "balance",
            write: false,
            drop: true,
        };
        let pk = Packets::new(&lua, access, LinkType::ETHERNET).unwrap();
        let b = super::tests_support::many(&frames);
        for round in 0..2 {
            assert_eq!(pk.load(&b, &[]).unwrap(), frames.len());
            for (i, s) in pk.shared.pkts[..frames.len()].iter().enumerate() {
                let base = s.addr.get();
                let d = b.data(i);
                assert_eq!(base, d.as_ptr() as u64);
                let w = parse_frame(d, true).words();
                let heads = s.heads.iter().map(Cell::get).collect::<Vec<_>>();
                assert_eq!(
                    (s.state.get(), s.offs.get(), heads),
                    (w.state, w.offs, w.heads.to_vec()),
                    "{round} {i}"
                );
            }
            pk.done();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod one_line_prelude {
    use super::*;

    #[test]
    fn packets_lua_joins_into_one_line_that_means_the_same() {
        // What joining lines could change: a line starting with `(`, a multi-line string or
        // comment other than the C declarations.
        for (i, l) in PRELUDE.lines().enumerate() {
            let t = l.trim_start();
            assert!(!t.starts_with('('), "packets.lua:{}: starts with (", i + 1);
            assert!(
                !t.starts_with("--[["),
                "packets.lua:{}: a block comment",
                i + 1
            );
        }
        assert_eq!(PRELUDE.matches("[[").count(), 1);
        let p = prelude();
        assert!(!p.contains('\n') && !p.contains("--"), "{p}");
        assert_eq!(
            one_line("local a = 1 -- one\n-- two\nlocal s = \"x--y\" .. 'it\\'s--' -- three\n"),
            "local a = 1 local s = \"x--y\" .. 'it\\'s--'"
        );
        assert!(p.contains("ffi.cdef([[ struct lr_pkt {"), "{p}");
    }
}

#[cfg(all(test, not(loom)))]
mod widths {
    use super::tests_support::*;
    use super::*;

    /// Writes of one width read back through another (a u16 field then its bytes, a byte then
    /// the u16 or u32 around it, the same field twice, whose setter reads the checksum's word
    /// around it), in a loop LuaJIT compiles: no value read stale, every checksum right.
    #[test]
    fn mixed_width_writes_read_back_what_was_written_compiled_or_not() {
        let src = r#"
            BAD = 0
            local band, rshift = bit.band, bit.rshift
            local function ipck(p)
              local s = 0
              for o = 14, 32, 2 do s = s + p:getU16(o) end
              while s > 0xffff do s = band(s, 0xffff) + rshift(s, 16) end
              return s == 0xffff
            end
            function f(pkts, n, k)
              for i = 1, n do
                local p, v = pkts[i], (i * 7919 + k) % 65536
                p.udp.sport = v
                if p:getByte(34) * 256 + p:getByte(35) ~= v then BAD = BAD + 1 end
                if p:getU32(34) ~= v * 65536 + p.udp.dport then BAD = BAD + 1 end
                p.ip4.ttl = (i + k) % 200
                p.ip4.ttl = (i + k + 1) % 200
                if p:getU16(22) ~= ((i + k + 1) % 200) * 256 + 17 then BAD = BAD + 1 end
                p.ip4.tos = i
                p.ip4.tos = (i + 3) % 256
                p.ip4.saddr = 0x0a000000 + k
                p.ip4.saddr = 0x0b000000 + k
                if p:getU16(26) ~= 0x0b00 or p:getByte(29) ~= k % 256 then BAD = BAD + 1 end
                p.ip4.id = v
                p.ip4.id = (v + 9) % 65536
                if not ipck(p) then BAD = BAD + 1 end
              end
              for i = 1, n do
                local p = pkts[i]
                p:setByte(36, i)
                if p.udp.dport ~= i * 256 + 53 then BAD = BAD + 1 end
                p:setU16(28, k % 65536)
                if p.ip4.saddr ~= 0x0b000000 + k % 65536 then BAD = BAD + 1 end
              end
            end"#;
        for jit in ["jit.on()", "jit.off()"] {
            let lua = new_lua();
            let pk = Packets::new(&lua, GEN_ACCESS, LinkType::ETHERNET).unwrap();
            lua.load(jit).exec().unwrap();
            lua.load(src).set_name("@w.lua").exec().unwrap();
            let f: mlua::Function = lua.globals().get("f").unwrap();
            let mut frames = vec![udp_frame(53); 64];
            for fr in &mut frames {
                fix_checksums(fr, LinkType::ETHERNET);
            }
            let mut b = many(&frames);
            for k in 0..300 {
                let n = pk.load_mut(&mut b, &[]).unwrap();
                f.call::<()>((pk.table().clone(), n, k)).unwrap();
                // the raw writes: the full recompute
                pk.store(&mut b, |_, d| fix_checksums(d, LinkType::ETHERNET));
            }
            let bad: i64 = lua.globals().get("BAD").unwrap();
            assert_eq!(bad, 0, "{jit}");
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests_support {
    use super::*;
    use crate::apps::lua::{new_state, ScriptOptions};
    use crate::mem::{Desc, Pool, PoolConfig};
    use std::sync::Arc;

    pub const GEN_ACCESS: Access = Access {
        tool: "gen",
        write: true,
        drop: false,
    };

    pub fn new_lua() -> Lua {
        new_state(&ScriptOptions::default()).unwrap()
    }

    pub fn udp_frame(dport: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[
            0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x04, 0x00]);
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 12, 0, 0, b'a', b'b', b'c', b'd']);
        f
    }

    pub fn many(frames: &[Vec<u8>]) -> Batch {
        let pool = Arc::new(Pool::new(&PoolConfig::default()).unwrap());
        let mut b = Batch::with_pool(&pool);
        for f in frames {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..f.len()].copy_from_slice(f);
            fr.push(Desc {
                len: f.len() as u32,
                wire_len: f.len() as u32,
                ..Default::default()
            });
        }
        b
    }

    pub fn one(f: Vec<u8>) -> Batch {
        many(&[f])
    }
}
