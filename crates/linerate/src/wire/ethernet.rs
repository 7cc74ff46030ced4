//! Ethernet II frames with 802.1Q / 802.1ad (QinQ) tag stacks.

use super::{arr, be16, ethertype, Layer, WireError};

/// Ethernet II header length (no tags).
pub const HEADER_LEN: usize = 14;
/// Length of one VLAN tag (TPID is the previous ethertype; TCI + next ethertype).
pub const TAG_LEN: usize = 4;
/// The most VLAN tags a [`Vlans`] stack records.
pub const MAX_VLANS: usize = 4;

/// A checked view of an Ethernet II frame: 14 header bytes are present.
#[derive(Clone, Copy, Debug)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
}

/// The VLAN tag stack of a frame, outermost first, and what follows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Vlans {
    ids: [u16; MAX_VLANS],
    count: u8,
    /// The ethertype after the last tag (the frame's ethertype if untagged).
    pub inner_ethertype: u16,
    /// Offset of the network header from the start of the frame (14 + 4 per tag).
    pub header_len: usize,
}

impl Vlans {
    /// The 12-bit VLAN ids, outermost first.
    pub fn ids(&self) -> &[u16] {
        &self.ids[..usize::from(self.count).min(MAX_VLANS)]
    }
}

/// Walks a VLAN tag stack that starts at `off` in `d` with the tag protocol id `tpid`
/// (an ethertype that [`ethertype::is_vlan`]). Returns (ids, count, inner ethertype, offset of
/// what follows the stack).
pub(crate) fn walk_vlans(
    d: &[u8],
    mut off: usize,
    mut tpid: u16,
) -> Result<([u16; MAX_VLANS], u8, u16, usize), WireError> {
    let mut ids = [0u16; MAX_VLANS];
    let mut n = 0usize;
    while ethertype::is_vlan(tpid) {
        if n == MAX_VLANS {
            return Err(WireError::TooManyVlans);
        }
        let (Some(tci), Some(next)) = (be16(d, off), be16(d, off + 2)) else {
            return Err(WireError::Truncated(Layer::Vlan));
        };
        ids[n] = tci & 0x0fff;
        n += 1;
        tpid = next;
        off += TAG_LEN;
    }
    Ok((ids, n as u8, tpid, off))
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the 14-byte header is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated(Layer::Link));
        }
        Ok(EthernetFrame { buf })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Destination MAC address.
    pub fn dst(&self) -> [u8; 6] {
        arr(self.buf.as_ref(), 0).unwrap_or_default()
    }

    /// Source MAC address.
    pub fn src(&self) -> [u8; 6] {
        arr(self.buf.as_ref(), 6).unwrap_or_default()
    }

    /// The outer ethertype (a TPID if the frame is tagged, a length if below 0x600).
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), 12).unwrap_or_default()
    }

    /// Everything after the 14-byte header (tags included).
    pub fn payload(&self) -> &[u8] {
        self.buf.as_ref().get(HEADER_LEN..).unwrap_or_default()
    }

    /// The VLAN tag stack (0x8100, 0x88a8, 0x9100 in any order), outermost first.
    pub fn vlans(&self) -> Result<Vlans, WireError> {
        let (ids, count, inner, off) = walk_vlans(self.buf.as_ref(), HEADER_LEN, self.ethertype())?;
        Ok(Vlans {
            ids,
            count,
            inner_ethertype: inner,
            header_len: off,
        })
    }

    /// The network-layer bytes after the tag stack.
    pub fn inner_payload(&self) -> Result<&[u8], WireError> {
        let v = self.vlans()?;
        Ok(self.buf.as_ref().get(v.header_len..).unwrap_or_default())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn frame(tags: &[(u16, u16)], inner: u16) -> Vec<u8> {
        let mut f = vec![1, 2, 3, 4, 5, 6, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf];
        for (tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&inner.to_be_bytes());
        f.extend_from_slice(&[0x45, 0, 0, 20]);
        f
    }

    #[test]
    fn untagged() {
        let f = frame(&[], 0x0800);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.dst(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(e.src(), [0xa, 0xb, 0xc, 0xd, 0xe, 0xf]);
        assert_eq!(e.ethertype(), 0x0800);
        assert_eq!(e.payload(), &[0x45, 0, 0, 20]);
        let v = e.vlans().unwrap();
        assert!(v.ids().is_empty());
        assert_eq!(v.inner_ethertype, 0x0800);
        assert_eq!(v.header_len, 14);
    }

    #[test]
    fn qinq_stack_outer_first() {
        // 0x88a8 outer (S-tag 100, PCP bits set), 0x8100 inner (C-tag 200), then a 0x9100 tag.
        let f = frame(&[(0x88a8, 0xe064), (0x8100, 200), (0x9100, 0x0fff)], 0x86dd);
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        let v = e.vlans().unwrap();
        assert_eq!(v.ids(), &[100, 200, 0x0fff]);
        assert_eq!(v.inner_ethertype, 0x86dd);
        assert_eq!(v.header_len, 26);
        assert_eq!(e.inner_payload().unwrap(), &[0x45, 0, 0, 20]);
    }

    #[test]
    fn too_many_tags() {
        let f = frame(
            &[
                (0x8100, 1),
                (0x8100, 2),
                (0x8100, 3),
                (0x8100, 4),
                (0x8100, 5),
            ],
            0x0800,
        );
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.vlans(), Err(WireError::TooManyVlans));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let f = frame(&[(0x88a8, 10), (0x8100, 20)], 0x0800);
        for n in 0..f.len() {
            match EthernetFrame::new_checked(&f[..n]) {
                Err(e) => {
                    assert!(n < 14);
                    assert_eq!(e, WireError::Truncated(Layer::Link));
                }
                Ok(e) => {
                    let _ = (e.dst(), e.src(), e.ethertype(), e.payload());
                    if n < 22 {
                        assert_eq!(e.vlans(), Err(WireError::Truncated(Layer::Vlan)), "len {n}");
                    } else {
                        assert_eq!(e.vlans().unwrap().ids(), &[10, 20]);
                    }
                }
            }
        }
    }
}
