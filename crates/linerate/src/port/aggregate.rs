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
    /// Every member writes into lent frames of one pool (the queues of an `xdp:` input on a
    /// cluster's segment): a lent batch is passed on to the member read, not swapped.
    lends: bool,
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
        let first = ports.first().and_then(|p| p.pool().cloned());
        let lends = first.as_ref().is_some_and(|f| {
            ports
                .iter()
                .all(|p| p.fills_lent_frames() && p.pool().is_some_and(|q| Arc::ptr_eq(f, q)))
        });
        Aggregate {
            lends,
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
        // packets go out in that port's own batch, swapped with the caller's.
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
                let got = self.ports[i].rx(batch)?;
                if got > 0 {
                    self.next = (i + 1) % n;
                    self.renumber(i, batch, before);
                    return Ok(got);
                }
                continue;
            }
            self.batches[i].set_limit(room);
            let got = self.ports[i].rx(&mut self.batches[i])?;
            if got > 0 {
                self.next = (i + 1) % n;
                batch.clear();
                std::mem::swap(batch, &mut self.batches[i]);
                self.renumber(i, batch, 0);
                return Ok(got);
            }
        }
        Ok(0)
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

    /// The members' pool when they share one and write into lent frames.
    fn pool(&self) -> Option<&Arc<Pool>> {
        if self.lends {
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

    fn stats(&mut self) -> PortStats {
        // No allocation: stats() is read on every statistics interval.
        let mut s = PortStats::default();
        for p in &mut self.ports {
            s.add(&p.stats());
        }
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

    fn interfaces(&self) -> Vec<Interface> {
        let lists: Vec<Vec<Interface>> = self.ports.iter().map(|p| p.interfaces()).collect();
        let mut v = Vec::new();
        for (k, list) in lists.iter().enumerate() {
            for j in 0..self.count[k] as usize {
                v.push(list.get(j).cloned().unwrap_or_else(|| {
                    Interface::new(self.ports[k].name(), self.ports[k].link_type())
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
