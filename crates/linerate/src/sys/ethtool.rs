//! ethtool ioctls (`SIOCETHTOOL`): one datagram socket, of the network namespace of the thread
//! that opened it (so are the interface names it is asked about), and the one call that hands
//! the kernel a command's structure. Callers build the structure as bytes, command word first,
//! and read the answer back from it; the command must be one this module knows the size of.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `ETHTOOL_GDRVINFO`: `struct ethtool_drvinfo`.
pub(crate) const ETHTOOL_GDRVINFO: u32 = 0x03;
/// `ETHTOOL_GSTRINGS`: `struct ethtool_gstrings` and its strings.
pub(crate) const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GSTATS`: `struct ethtool_stats` and its counters.
pub(crate) const ETHTOOL_GSTATS: u32 = 0x1d;
/// `ETHTOOL_GGRO`: `struct ethtool_value`.
pub(crate) const ETHTOOL_GGRO: u32 = 0x2b;
/// `ETHTOOL_GSSET_INFO`: `struct ethtool_sset_info` and one word per set asked.
pub(crate) const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETHTOOL_GCHANNELS`: `struct ethtool_channels`.
pub(crate) const ETHTOOL_GCHANNELS: u32 = 0x3c;
/// Size of one `ETHTOOL_GSTRINGS` string.
pub(crate) const ETH_GSTRING_LEN: usize = 32;

fn word(b: &[u8], i: usize) -> u32 {
    b.get(i * 4..i * 4 + 4)
        .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
        .unwrap_or(0)
}

/// The bytes the kernel reads and writes for the command whose structure is `data`, as far as
/// the structure itself tells (for strings and counters, the count the caller put in it); None
/// for a command this module does not know.
fn size_of_command(data: &[u8]) -> Option<usize> {
    Some(match word(data, 0) {
        // cmd, driver[32], version[32], fw_version[32], bus_info[32], erom_version[32],
        // reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len.
        ETHTOOL_GDRVINFO => 196,
        // cmd, string_set, len, then len strings.
        ETHTOOL_GSTRINGS => 12 + (word(data, 2) as usize).checked_mul(ETH_GSTRING_LEN)?,
        // cmd, n_stats, then n_stats u64.
        ETHTOOL_GSTATS => 8 + (word(data, 1) as usize).checked_mul(8)?,
        // cmd, data.
        ETHTOOL_GGRO => 8,
        // cmd, reserved, u64 sset_mask, then a word per set in the mask.
        ETHTOOL_GSSET_INFO => {
            let mask = u64::from_ne_bytes(data.get(8..16)?.try_into().ok()?);
            16 + 4 * mask.count_ones() as usize
        }
        // cmd, max_rx, max_tx, max_other, max_combined, rx, tx, other, combined.
        ETHTOOL_GCHANNELS => 36,
        _ => return None,
    })
}

/// A socket for ethtool requests, in the network namespace of the thread that opened it.
#[derive(Debug)]
pub(crate) struct EthtoolSocket(OwnedFd);

impl EthtoolSocket {
    /// A socket in the calling thread's network namespace.
    pub(crate) fn open() -> io::Result<EthtoolSocket> {
        super::sock::socket(libc::AF_INET, libc::SOCK_DGRAM, 0).map(EthtoolSocket)
    }

    /// Runs the ethtool command whose structure (command word first) is `data` on interface
    /// `name`. ENODEV for a name no interface can have; EINVAL for a command this module does
    /// not know or a `data` shorter than the command's structure.
    ///
    /// For `ETHTOOL_GSTRINGS` and `ETHTOOL_GSTATS` the kernel writes as many entries as the
    /// driver has at the moment of the call, not the count in `data`: the caller sizes `data`
    /// for more than it asked (a driver whose set grew past that between the count and this
    /// call is the one case the kernel's interface cannot rule out).
    pub(crate) fn call(&self, name: &str, data: &mut [u8]) -> io::Result<()> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        match size_of_command(data) {
            Some(n) if n <= data.len() => {}
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
        // SAFETY: ifreq is plain data; all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = data.as_mut_ptr() as *mut libc::c_char;
        // SAFETY: `req` names the interface (NUL-terminated: the name is shorter than the
        // array, which was zeroed) and points to `data`, which lives across the call. SIOCETHTOOL
        // reads the command word and writes at most the size of that command's structure, which
        // was checked above to fit in `data` (for strings and counters, see the note above).
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), libc::SIOCETHTOOL, &mut req) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Runs one ethtool command on interface `name` of the calling thread's network namespace,
/// through a socket of its own (see [`EthtoolSocket::call`]).
pub(crate) fn ethtool(name: &str, data: &mut [u8]) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    EthtoolSocket::open()?.call(name, data)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn commands_of_unknown_size_or_short_buffers_are_refused() {
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&0x7777u32.to_ne_bytes());
        assert_eq!(
            ethtool("lo", &mut v).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        let mut short = [0u8; 100];
        short[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
        assert_eq!(
            ethtool("lo", &mut short).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        let mut s = vec![0u8; 12 + 2 * ETH_GSTRING_LEN];
        s[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
        s[8..12].copy_from_slice(&3u32.to_ne_bytes());
        assert_eq!(
            ethtool("lo", &mut s).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        for bad in ["", "a\0b", "sixteen-bytes-ab"] {
            assert_eq!(
                ethtool(bad, &mut [0u8; 4]).unwrap_err().raw_os_error(),
                Some(libc::ENODEV)
            );
        }
    }

    #[test]
    fn loopback_has_driver_information() {
        let mut info = [0u8; 196];
        info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
        // Some kernels give lo no ethtool operations at all (EOPNOTSUPP); none fail otherwise.
        match ethtool("lo", &mut info) {
            Ok(()) => assert_eq!(word(&info, 0), ETHTOOL_GDRVINFO),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
    }
}
