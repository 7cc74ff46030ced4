//! The driver's view of an interface for `linerate watch`: driver information
//! (`ETHTOOL_GDRVINFO`) and the driver's own counters (`ethtool -S`: `ETHTOOL_GSTRINGS` and
//! `ETHTOOL_GSTATS`), asked through [`crate::sys::ethtool`]'s socket, which belongs to the network
//! namespace of the thread that opened it (so do the interface names it is asked about).

use crate::sys::ethtool::{
    EthtoolSocket, ETHTOOL_GDRVINFO, ETHTOOL_GSSET_INFO, ETHTOOL_GSTATS, ETHTOOL_GSTRINGS,
    ETH_GSTRING_LEN,
};
use std::io;

const ETH_SS_STATS: u32 = 1;
/// Most counters taken from one driver (a 64-queue NIC has a few thousand).
const MAX_STATS: usize = 1 << 16;

/// A socket for ethtool requests, in the namespace of the thread that opened it.
#[derive(Debug)]
pub(crate) struct Ethtool(EthtoolSocket);

/// What `ETHTOOL_GDRVINFO` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DrvInfo {
    /// Driver ("veth", "virtio_net", "ixgbe").
    pub driver: String,
    /// Bus address ("0000:00:03.0" for PCI), empty for virtual devices.
    pub bus_info: String,
    /// Number of `ethtool -S` counters.
    pub n_stats: u32,
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn word(b: &[u8], i: usize) -> u32 {
    b.get(i * 4..i * 4 + 4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .unwrap_or(0)
}

impl Ethtool {
    /// A socket in the calling thread's network namespace.
    pub(crate) fn open() -> io::Result<Ethtool> {
        EthtoolSocket::open().map(Ethtool)
    }

    /// Runs the ethtool command whose structure (command word first) is `data` on `name`.
    fn call(&self, name: &str, data: &mut [u8]) -> io::Result<()> {
        self.0.call(name, data)
    }

    /// Driver, bus address and counter count of `name`.
    pub(crate) fn drvinfo(&self, name: &str) -> io::Result<DrvInfo> {
        // struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
        // erom_version[32], reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len,
        // regdump_len: 196 bytes.
        let mut info = [0u8; 196];
        info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
        self.call(name, &mut info)?;
        Ok(DrvInfo {
            driver: cstr(&info[4..36]),
            bus_info: cstr(&info[100..132]),
            n_stats: word(&info, 45),
        })
    }

    /// How many `ethtool -S` counters `name` has now (`ETHTOOL_GSSET_INFO`, else the driver
    /// information's count).
    fn stats_count(&self, name: &str) -> io::Result<usize> {
        // struct ethtool_sset_info: cmd, reserved, u64 sset_mask, then one u32 per set asked.
        let mut si = [0u8; 20];
        si[..4].copy_from_slice(&ETHTOOL_GSSET_INFO.to_ne_bytes());
        si[8..16].copy_from_slice(&(1u64 << ETH_SS_STATS).to_ne_bytes());
        match self.call(name, &mut si) {
            Ok(()) => {
                let mask = u64::from_ne_bytes(si[8..16].try_into().unwrap_or([0; 8]));
                Ok(if mask & (1 << ETH_SS_STATS) != 0 {
                    word(&si, 4) as usize
                } else {
                    0
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(0),
            Err(_) => Ok(self.drvinfo(name)?.n_stats as usize),
        }
    }

    /// Room for a reply of `n` entries: the kernel writes as many as the driver has at the
    /// moment of the call, which may have grown since it was asked (queues added), so twice
    /// as many and 256 more are allowed for.
    fn room(n: usize) -> usize {
        (n * 2 + 256).min(MAX_STATS * 2)
    }

    /// The names of `name`'s `ethtool -S` counters (empty when the driver has none).
    pub(crate) fn stat_names(&self, name: &str) -> io::Result<Vec<String>> {
        let n = self.stats_count(name)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        if n > MAX_STATS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{n} ethtool counters (more than {MAX_STATS})"),
            ));
        }
        // struct ethtool_gstrings: cmd, string_set, len, then len * 32 bytes.
        let mut buf = vec![0u8; 12 + Self::room(n) * ETH_GSTRING_LEN];
        buf[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        buf[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
        buf[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
        self.call(name, &mut buf)?;
        let len = (word(&buf, 2) as usize).min(Self::room(n));
        Ok(buf[12..12 + len * ETH_GSTRING_LEN]
            .chunks_exact(ETH_GSTRING_LEN)
            .map(cstr)
            .collect())
    }

    /// The values of `name`'s `ethtool -S` counters, `n` of them expected (the length of
    /// [`Ethtool::stat_names`]); the vector returned has as many as the kernel gave (a
    /// different count means the driver's set changed: read the names again).
    pub(crate) fn stats(&self, name: &str, n: usize) -> io::Result<Vec<u64>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let room = Self::room(n);
        // struct ethtool_stats: cmd, n_stats, then n_stats u64.
        let mut buf = vec![0u8; 8 + room * 8];
        buf[..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
        buf[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
        self.call(name, &mut buf)?;
        let got = (word(&buf, 1) as usize).min(room);
        Ok(buf[8..8 + got * 8]
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect())
    }
}
