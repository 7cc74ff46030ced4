//! `a,b`: several input ports read round-robin, one batch from each in turn.

use super::sys::PollSet;
use super::{Interface, LinkType, Port, PortError, PortStats};
use crate::mem::{Batch, Pool};
use std::sync::Arc;

/// Several ports read round-robin; each packet's `port` field says which interface it came
/// from: member `i`'s interfaces are numbered after those of the members before it (one per
/// member, unless a member is itself several, like a pcapng file with several interfaces).
/// Transmit goes to the first port.
pub struct Aggregate {
    name: String,
    ports: Vec<Box<dyn Port>>,
    next: usize,
    batches: Vec<Batch>,
    /// Id of each member's first interface.
    base: Vec<u16>,
    /// Interfaces of each member when it was aggregated.
    count: Vec<u16>,
    /// Interfaces a member revealed later (a pcapng input describing one after its first
    /// packet): (member, its id, our id); ours come after every member's first ones.
    late: Vec<(usize, u16, u16)>,
    /// All members' descriptors, when every member has one and the aggregate waits.
    poll: Option<PollSet>,
    wait_ms: i32,
    /// Every member writes into lent frames, either of one pool they share (the queues of an
    /// `xdp:` input on a cluster's segment) or of any pool (several pcap files read as one): a
    /// lent batch is passed on to the member read, not swapped.
    lends: bool,
    /// Every member writes into lent frames of any pool (not only of its own).
    any_pool: bool,
    /// Every member writes into lent frames of one pool they share: it is ours ([`Port::pool`]).
    pooled: bool,
    /// Per member, a filter the aggregate runs itself: members of different link types whose
    /// own kernel cannot run it (each compiled for its member's link type).
    user: Vec<Option<crate::filter::Filter>>,
    /// Packets those filters rejected.
    filtered: u64,
}

impl Aggregate {
    /// Aggregates `ports` under the name `name`; an `rx` that finds nothing returns 0 at once
    /// (members wait as they were opened to).
    pub fn new(name: &str, ports: Vec<Box<dyn Port>>) -> Aggregate {
        Self::with_wait(name, ports, 0)
    }

    /// Aggregates `ports` whose own `rx` does not wait: an `rx` that finds nothing in any of
    /// them waits up to `wait_ms` for any of their descriptors at once (members without a
    /// descriptor: no wait). When every member has a descriptor, the aggregate has one too
    /// (an epoll instance over theirs).
    pub fn with_wait(name: &str, ports: Vec<Box<dyn Port>>, wait_ms: i32) -> Aggregate {
        let batches = ports.iter().map(|_| Batch::new()).collect();
        let fds: Option<Vec<i32>> = ports.iter().map(|p| p.poll_fd()).collect();
        let count: Vec<u16> = ports
            .iter()
            .map(|p| p.interfaces().len().clamp(1, u16::MAX as usize) as u16)
            .collect();
        let mut base = Vec::with_capacity(count.len());
        let mut next = 0u16;
        for &c in &count {
            base.push(next);
            next = next.saturating_add(c);
        }
        // A member that takes only its own pool's lent frames (an AF_XDP socket on a lent
        // area) shares it with every other member, or the aggregate takes no loan: a batch lent
        // by a pool it does not share would leave that member unread.
        let fill = !ports.is_empty() && ports.iter().all(|p| p.fills_lent_frames());
        let any_pool = fill && ports.iter().all(|p| p.fills_lent_frames_of_any_pool());
        let first = ports.first().and_then(|p| p.pool().cloned());
        let shared = first.as_ref().is_some_and(|f| {
            ports
                .iter()
                .all(|p| p.pool().is_some_and(|q| Arc::ptr_eq(f, q)))
        });
        let pooled = fill && shared;
        Aggregate {
            user: Vec::new(),
            filtered: 0,
            lends: pooled || any_pool,
            any_pool,
            pooled,
            name: name.into(),
            ports,
            next: 0,
            batches,
            base,
            count,
            late: Vec::new(),
            poll: fds.and_then(|f| PollSet::new(&f)),
            wait_ms,
        }
    }

    /// The members, in order.
    pub fn into_parts(self) -> Vec<Box<dyn Port>> {
        self.ports
    }

    /// Our id for interface `p` of member `i`, which it did not have when aggregated.
    #[cold]
    fn late_id(&mut self, i: usize, p: u16) -> u16 {
        if let Some(&(_, _, id)) = self.late.iter().find(|l| l.0 == i && l.1 == p) {
            return id;
        }
        let first: u32 = self.count.iter().map(|&c| u32::from(c)).sum();
        let id = (first + self.late.len() as u32).min(u32::from(u16::MAX)) as u16;
        self.late.push((i, p, id));
        id
    }

    /// One round over the members: the first that has packets fills `batch`.
    fn round(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        // Ports have their own pools: a batch holds one pool, so each round reads one port whose
        // packets go out in that port's own batch, swapped with the caller's. A lent batch is
        // read into by the member itself (every member writes into lent frames).
        let n = self.ports.len();
        // The caller's limit holds for what a member gives (count -c takes no packet it does
        // not count).
        let room = batch.room();
        if room == 0 {
            return Ok(0);
        }
        let lent = self.lends && batch.is_lent();
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.ports[i].is_finished() {
                continue;
            }
            if lent {
                // The member receives into the caller's lent frames (and takes the lent
                // frames it needs for later): no batch of its own.
                let before = batch.len();
                let mut got = self.ports[i].rx(batch)?;
                if got > 0 {
                    self.next = (i + 1) % n;
                    got -= self.filter(i, batch, before);
                    self.renumber(i, batch, before);
                    if got > 0 {
                        return Ok(got);
                    }
                }
                continue;
            }
            self.batches[i].set_limit(room);
            let mut got = self.ports[i].rx(&mut self.batches[i])?;
            if got > 0 {
                self.next = (i + 1) % n;
                batch.clear();
                std::mem::swap(batch, &mut self.batches[i]);
                got -= self.filter(i, batch, 0);
                self.renumber(i, batch, 0);
                if got > 0 {
                    return Ok(got);
                }
            }
        }
        Ok(0)
    }

    /// Runs member `i`'s own filter (if the aggregate runs one for it) on the packets of `batch`
    /// from `from` on, testing `len` on the wire length as libpcap does; returns how many it
    /// took out (counted as filtered).
    fn filter(&mut self, i: usize, batch: &mut Batch, from: usize) -> usize {
        let Some(Some(f)) = self.user.get(i) else {
            return 0;
        };
        let mut k = 0;
        let gone = batch.retain(|p| {
            let keep = k < from || f.matches_pkt(p);
            k += 1;
            keep
        });
        self.filtered += gone as u64;
        gone
    }

    /// Gives the packets of member `i` from `from` on in `batch` our interface ids.
    fn renumber(&mut self, i: usize, batch: &mut Batch, from: usize) {
        let (base, count) = (self.base[i], self.count[i]);
        for k in from..batch.len() {
            let p = batch.descs()[k].port;
            let id = if p < count {
                base + p
            } else {
                self.late_id(i, p)
            };
            batch.descs_mut()[k].port = id;
        }
    }
}

impl Port for Aggregate {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        let got = self.round(batch)?;
        if got > 0 {
            return Ok(got);
        }
        let wait = self.wait_ms;
        if wait > 0 && self.poll.as_mut().is_some_and(|p| p.wait(wait)) {
            return self.round(batch);
        }
        Ok(0)
    }

    fn tx(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        self.ports[0].tx(batch)
    }

    fn tx_ended(&self) -> bool {
        self.ports[0].tx_ended()
    }

    fn tx_end_note(&self) -> Option<String> {
        self.ports[0].tx_end_note()
    }

    fn tx_overwritten(&self) -> Option<(u64, &'static str)> {
        let all: Vec<_> = self
            .ports
            .iter()
            .filter_map(|p| p.tx_overwritten())
            .collect();
        let by = all.first()?.1;
        Some((all.iter().map(|o| o.0).sum(), by))
    }

    /// The members' pool when they share one and write into lent frames.
    fn pool(&self) -> Option<&Arc<Pool>> {
        if self.pooled {
            self.ports.first().and_then(|p| p.pool())
        } else {
            None
        }
    }

    fn fills_lent_frames(&self) -> bool {
        self.lends
    }

    /// Each member that can (each batch is one member's).
    fn read_in_place(&mut self) -> bool {
        let mut any = false;
        for p in &mut self.ports {
            any |= p.read_in_place();
        }
        any
    }

    fn fills_lent_frames_of_any_pool(&self) -> bool {
        self.any_pool
    }

    /// The longest of the members' (None if a member has no pool of its own).
    fn max_rx_packet(&self) -> Option<usize> {
        self.ports
            .iter()
            .map(|p| p.max_rx_packet())
            .try_fold(0, |most, m| m.map(|m| most.max(m)))
    }

    /// Arrival times only when every member gives them.
    fn rx_time(&self) -> super::RxTime {
        let first = self.ports.first().map(|p| p.rx_time()).unwrap_or_default();
        if self.ports.iter().all(|p| p.rx_time() == first) {
            first
        } else {
            super::RxTime::Read
        }
    }

    fn flush(&mut self) -> Result<(), PortError> {
        for p in &mut self.ports {
            p.flush()?;
        }
        Ok(())
    }

    fn tx_finish(&mut self) -> Result<(), PortError> {
        for p in &mut self.ports {
            p.tx_finish()?;
        }
        Ok(())
    }

    fn stats(&mut self) -> PortStats {
        // No allocation: stats() is read on every statistics interval.
        let mut s = PortStats::default();
        for p in &mut self.ports {
            s.add(&p.stats());
        }
        s.rx_drops.add(super::DropReason::Filter, self.filtered);
        s
    }

    /// The least of the members' (a frame may leave on any of them).
    fn max_tx_frame(&self, tagged: bool) -> Option<usize> {
        self.ports
            .iter()
            .filter_map(|p| p.max_tx_frame(tagged))
            .min()
    }

    fn link_type(&self) -> LinkType {
        self.ports[0].link_type()
    }

    /// Members of one link type: the caller's filter runs on them all (in the kernel where
    /// every member takes it, else in user space). Members of different link types (`any`
    /// with an Ethernet interface): the expression is compiled for each member's link type and
    /// runs in that member's kernel, or here on its packets where its kernel cannot.
    fn attach_filter(&mut self, filter: &crate::filter::Filter) -> Result<bool, PortError> {
        let link = self.ports[0].link_type();
        if self.ports.iter().all(|p| p.link_type() == link) {
            let mut all = true;
            for p in &mut self.ports {
                all &= p.attach_filter(filter)?;
            }
            return Ok(all);
        }
        let mut user = Vec::with_capacity(self.ports.len());
        for p in &mut self.ports {
            let f = crate::filter::Filter::compile(filter.expr(), p.link_type()).map_err(|e| {
                PortError::BadUri {
                    uri: p.name().to_string(),
                    why: e.to_string(),
                }
            })?;
            // A member whose kernel cannot run it: the aggregate runs it on its packets.
            user.push((!p.attach_filter(&f)?).then_some(f));
        }
        self.user = user;
        Ok(true)
    }

    fn interfaces(&self) -> Vec<Interface> {
        let lists: Vec<Vec<Interface>> = self.ports.iter().map(|p| p.interfaces()).collect();
        let mut v = Vec::new();
        for (k, list) in lists.iter().enumerate() {
            for j in 0..self.count[k] as usize {
                v.push(list.get(j).cloned().unwrap_or_else(|| {
                    Interface::new(self.ports[k].name(), self.ports[k].link_type())
                        .with_snaplen(self.ports[k].snaplen().unwrap_or(0))
                }));
            }
        }
        for &(k, p, _) in &self.late {
            v.push(lists[k].get(p as usize).cloned().unwrap_or_else(|| {
                Interface::new(
                    &format!("{}#{p}", self.ports[k].name()),
                    self.ports[k].link_type(),
                )
            }));
        }
        v
    }

    fn interface_stats(&mut self) -> Vec<PortStats> {
        let lists: Vec<Vec<PortStats>> =
            self.ports.iter_mut().map(|p| p.interface_stats()).collect();
        let mut v = Vec::new();
        for (k, list) in lists.iter().enumerate() {
            for j in 0..self.count[k] as usize {
                v.push(list.get(j).copied().unwrap_or_default());
            }
        }
        for &(k, p, _) in &self.late {
            v.push(lists[k].get(p as usize).copied().unwrap_or_default());
        }
        v
    }

    fn describe(&mut self, ifaces: &[Interface]) -> Result<(), PortError> {
        self.ports[0].describe(ifaces)
    }

    fn finish(&mut self, stats: &[super::InterfaceStats]) -> Result<(), PortError> {
        self.ports[0].finish(stats)
    }

    fn tx_by_interface(&self) -> Vec<u64> {
        self.ports[0].tx_by_interface()
    }

    fn is_finished(&self) -> bool {
        self.ports.iter().all(|p| p.is_finished())
    }

    fn poll_fd(&self) -> Option<i32> {
        self.poll.as_ref().map(|p| p.fd())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::mem::{Desc, PoolConfig};
    use crate::port::pcap::PcapPort;
    use crate::port::{DropReason, PortOptions};
    use std::io::Cursor;

    /// A classic pcap file of records `sizes`, record `k` all bytes `fill + k`.
    fn pcap(name: &str, sizes: &[usize], fill: u8) -> Box<dyn Port> {
        let mut file = Vec::new();
        for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, 1] {
            file.extend_from_slice(&w.to_le_bytes());
        }
        for (k, &n) in sizes.iter().enumerate() {
            for w in [1, k as u32, n as u32, n as u32] {
                file.extend_from_slice(&w.to_le_bytes());
            }
            file.extend(std::iter::repeat_n(fill + k as u8, n));
        }
        let opts = PortOptions {
            frames: 256,
            ..Default::default()
        };
        Box::new(PcapPort::from_reader(name, Box::new(Cursor::new(file)), &opts).unwrap())
    }

    /// A port that writes only into lent frames of its own pool, as an AF_XDP socket on a lent
    /// area does.
    struct OwnPoolOnly(Arc<Pool>);

    impl Port for OwnPoolOnly {
        fn name(&self) -> &str {
            "own"
        }
        fn rx(&mut self, _batch: &mut Batch) -> Result<usize, PortError> {
            Ok(0)
        }
        fn tx(&mut self, _batch: &mut Batch) -> Result<usize, PortError> {
            Ok(0)
        }
        fn stats(&mut self) -> PortStats {
            PortStats::default()
        }
        fn pool(&self) -> Option<&Arc<Pool>> {
            Some(&self.0)
        }
        fn fills_lent_frames(&self) -> bool {
            true
        }
    }

    fn heap_pool(big_frames: u32) -> Arc<Pool> {
        Arc::new(
            Pool::new(&PoolConfig {
                frames: 256,
                big_frames,
                ..Default::default()
            })
            .unwrap(),
        )
    }

    /// Several pcap files read as one write into frames another pool lends the batch (a
    /// cluster master's): each member in turn, its records in the lent frames, a long one in a
    /// lent big frame, one longer than the lender carries dropped as too_big by the member,
    /// interfaces numbered one per file. `pool()` still says they share none.
    #[test]
    fn files_read_as_one_write_into_frames_of_a_lending_pool() {
        let mut agg = Aggregate::new(
            "a,b",
            vec![
                pcap("a.pcap", &[60, 9000, 200_000, 1514], 0x10),
                pcap("b.pcap", &[100, 60], 0x40),
            ],
        );
        assert!(agg.fills_lent_frames() && agg.fills_lent_frames_of_any_pool());
        assert!(agg.pool().is_none());
        assert!(agg.max_rx_packet().is_some_and(|m| m >= 200_000));

        let lender = heap_pool(4);
        let (size, head) = (lender.frame_size(), lender.headroom());
        let big_first = u64::from(lender.frames()) * u64::from(size);
        let big_size = lender.frame_size_at(big_first + u64::from(head));
        let mut b = Batch::new();
        // Big frames of 16,000 bytes' room, as a cluster's are at most 128 KiB.
        b.lend(&lender, size - head, Some((big_first, 16_000)));
        for f in 0..64u64 {
            b.lend_frame(f * u64::from(size) + u64::from(head));
        }
        for f in 0..2u64 {
            b.lend_big_frame(big_first + f * big_size + u64::from(head));
        }
        let mut got: Vec<(u16, usize, u8)> = Vec::new();
        for _ in 0..2 {
            let n = agg.rx(&mut b).unwrap();
            assert!(n > 0);
            assert!(b.is_lent() && b.pool().is_some_and(|p| Arc::ptr_eq(p, &lender)));
            for k in 0..b.len() {
                let Desc { addr, port, .. } = b.descs()[k];
                let data = b.data(k);
                assert!(data.iter().all(|&x| x == data[0]));
                assert_eq!(lender.is_big(addr), data.len() > (size - head) as usize);
                got.push((port, data.len(), data[0]));
            }
            b.forget();
        }
        assert_eq!(
            got,
            [
                (0, 60, 0x10),
                (0, 9000, 0x11),
                (0, 1514, 0x13),
                (1, 100, 0x40),
                (1, 60, 0x41)
            ]
        );
        assert!(agg.is_finished());
        let s = agg.stats();
        assert_eq!((s.rx_packets, s.rx_drops.get(DropReason::TooBig)), (5, 1));
        b.unlend(|_| {});
    }

    /// A member that takes only its own pool's lent frames makes an aggregate with a file take
    /// no loan (a batch lent by a pool it does not share would leave it unread); members that
    /// share its pool keep taking one, and it is their pool.
    #[test]
    fn a_member_bound_to_its_own_pool_takes_a_loan_only_with_members_of_that_pool() {
        let own = heap_pool(0);
        let mixed = Aggregate::new(
            "own,a",
            vec![
                Box::new(OwnPoolOnly(own.clone())),
                pcap("a.pcap", &[60], 0x10),
            ],
        );
        assert!(!mixed.fills_lent_frames() && !mixed.fills_lent_frames_of_any_pool());
        assert!(mixed.pool().is_none());
        let shared = Aggregate::new(
            "own,own",
            vec![
                Box::new(OwnPoolOnly(own.clone())),
                Box::new(OwnPoolOnly(own.clone())),
            ],
        );
        assert!(shared.fills_lent_frames() && !shared.fills_lent_frames_of_any_pool());
        assert!(shared.pool().is_some_and(|p| Arc::ptr_eq(p, &own)));
    }
}
