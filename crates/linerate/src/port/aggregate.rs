//! `a,b`: several input ports read round-robin, one batch from each in turn.

use super::sys::PollSet;
use super::{LinkType, Port, PortError, PortStats};
use crate::mem::Batch;

/// Several ports read round-robin; each packet's `port` field says which one it came from.
/// Transmit goes to the first port.
pub struct Aggregate {
    name: String,
    ports: Vec<Box<dyn Port>>,
    next: usize,
    batches: Vec<Batch>,
    /// All members' descriptors, when every member has one and the aggregate waits.
    poll: Option<PollSet>,
    wait_ms: i32,
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
        Aggregate {
            name: name.into(),
            ports,
            next: 0,
            batches,
            poll: fds.and_then(|f| PollSet::new(&f)),
            wait_ms,
        }
    }

    /// The members, in order.
    pub fn into_parts(self) -> Vec<Box<dyn Port>> {
        self.ports
    }

    /// One round over the members: the first that has packets fills `batch`.
    fn round(&mut self, batch: &mut Batch) -> Result<usize, PortError> {
        // Ports have their own pools: a batch holds one pool, so each round reads one port whose
        // packets go out in that port's own batch, swapped with the caller's.
        let n = self.ports.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if self.ports[i].is_finished() {
                continue;
            }
            let got = self.ports[i].rx(&mut self.batches[i])?;
            if got > 0 {
                self.next = (i + 1) % n;
                for d in self.batches[i].descs_mut() {
                    d.port = i as u16;
                }
                batch.clear();
                std::mem::swap(batch, &mut self.batches[i]);
                return Ok(got);
            }
        }
        Ok(0)
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
        let mut s = PortStats::default();
        for p in &mut self.ports {
            let o = p.stats();
            s.rx_packets += o.rx_packets;
            s.rx_bytes += o.rx_bytes;
            s.tx_packets += o.tx_packets;
            s.tx_bytes += o.tx_bytes;
            s.rx_drops = s.rx_drops.merged(&o.rx_drops);
            s.tx_drops = s.tx_drops.merged(&o.tx_drops);
        }
        s
    }

    fn link_type(&self) -> LinkType {
        self.ports[0].link_type()
    }

    fn is_finished(&self) -> bool {
        self.ports.iter().all(|p| p.is_finished())
    }

    fn poll_fd(&self) -> Option<i32> {
        self.poll.as_ref().map(|p| p.fd())
    }
}
