//! Opening a port from its URI: the one place that knows every kind of port, the cluster's
//! consumer (`cluster:ID@Q`, in [`crate::cluster`]) included, so that `port` and `cluster` do
//! not import each other. Re-exported at the crate root: `linerate::open_rx("xdp:eth0", ...)`.

use crate::port::{
    afpacket, mem, pcap, xdp, Aggregate, Direction, LinkType, Port, PortError, PortOptions, Uri,
};

/// Opens the port named by `uri` to receive from it: a capture file is opened read-only and
/// never created.
///
/// A capture loop (crates/linerate/examples/capture.rs is the whole program):
///
/// ```
/// use linerate::mem::Batch;
/// use linerate::open_rx;
/// use linerate::port::PortOptions;
///
/// let uri = concat!("pcap:", env!("CARGO_MANIFEST_DIR"), "/../../examples/sample.pcap");
/// let mut port = open_rx(uri, &PortOptions::default())?; // or afpacket:eth0, xdp:eth0, ...
/// let mut batch = Batch::new();
/// let mut bytes = 0u64;
/// while !port.is_finished() {
///     port.rx(&mut batch)?; // up to 64 packets, zero-copy where the port allows
///     bytes += batch.iter().map(|p| p.data.len() as u64).sum::<u64>();
///     batch.clear(); // the frames go back to the port
/// }
/// assert_eq!(port.stats().rx_packets, 2000);
/// # Ok::<(), linerate::port::PortError>(())
/// ```
pub fn open_rx(uri: &str, opts: &PortOptions) -> Result<Box<dyn Port>, PortError> {
    open(uri, opts, Direction::Rx)
}

/// Opens the port named by `uri` to send to it: a capture file is created (or truncated), unless
/// it is one of `opts.inputs`.
pub fn open_tx(uri: &str, opts: &PortOptions) -> Result<Box<dyn Port>, PortError> {
    open(uri, opts, Direction::Tx)
}

/// Opens the port named by `uri` for `dir` (kernel and `mem` ports do both whatever `dir` is).
/// A URI that names several receive paths (`a,b`, or `xdp:IFACE` on an interface with several
/// queues) is one [`Aggregate`] that reads them round-robin and waits on all of them at once.
pub fn open(uri: &str, opts: &PortOptions, dir: Direction) -> Result<Box<dyn Port>, PortError> {
    let mut parts = open_parts(uri, opts, dir)?;
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    Ok(Box::new(Aggregate::with_wait(
        uri,
        parts,
        opts.rx_wait_ms.min(1000) as i32,
    )))
}

/// Opens the paths `uri` names, apart, for tools that give each thread its own: every member of
/// `a,b`, every queue of `xdp:IFACE` (one shared UMEM per interface). When there are several,
/// none of them waits in `rx` (whoever reads several polls them together).
pub fn open_parts(
    uri: &str,
    opts: &PortOptions,
    dir: Direction,
) -> Result<Vec<Box<dyn Port>>, PortError> {
    open_uri_parts(&Uri::parse(uri)?, opts, dir)
}

/// [`open_parts`] of a parsed URI.
pub fn open_uri_parts(
    uri: &Uri,
    opts: &PortOptions,
    dir: Direction,
) -> Result<Vec<Box<dyn Port>>, PortError> {
    let list = uri.members();
    let part_opts = if list.len() > 1 {
        PortOptions {
            rx_wait_ms: 0,
            ..opts.clone()
        }
    } else {
        opts.clone()
    };
    let mut out: Vec<Box<dyn Port>> = Vec::new();
    for part in list {
        match part {
            Uri::Xdp { iface, queues } => {
                for q in xdp::open_queues_of(iface, *queues, &part_opts, &opts.xdp, None)? {
                    out.push(Box::new(q));
                }
            }
            one => out.push(open_one(one, &part_opts, dir)?),
        }
    }
    Ok(out)
}

/// Opens one port (not a list).
fn open_one(uri: &Uri, opts: &PortOptions, dir: Direction) -> Result<Box<dyn Port>, PortError> {
    let file =
        |path: &str, format: Option<pcap::WriteFormat>| -> Result<Box<dyn Port>, PortError> {
            Ok(Box::new(match dir {
                Direction::Rx => pcap::PcapPort::open(path, opts)?,
                // Records are written whole (up to libpcap's 256 KiB): the file's snaplen is the
                // largest a reader accepts, not the capture ports' default.
                Direction::Tx => pcap::PcapPort::create_as(
                    path,
                    format.or(opts.write_format),
                    LinkType::ETHERNET,
                    0,
                    &opts.inputs,
                )?,
            }))
        };
    match uri {
        Uri::Mem(name) => Ok(Box::new(mem::MemPort::open(name, opts)?)),
        // Read: either format; `pcapng:` is written as pcapng whatever the name.
        Uri::File { path, format } => file(path, *format),
        Uri::AfPacket(iface) => Ok(Box::new(afpacket::AfPacket::open(iface, opts)?)),
        Uri::Xdp { iface, queues } => {
            let ports = xdp::open_queues_of(iface, *queues, opts, &opts.xdp, None)?;
            Ok(xdp::join(&uri.to_string(), ports, opts.rx_wait_ms))
        }
        Uri::Cluster(spec) => Ok(Box::new(crate::cluster::ClusterPort::open(spec)?)),
        Uri::Bare(rest) => {
            if std::path::Path::new(rest).exists()
                || rest.ends_with(".pcap")
                || rest.ends_with(".pcapng")
                || rest == "-"
                // An output whose format was named (--format) is a file, whatever its name.
                || (dir == Direction::Tx && opts.write_format.is_some())
            {
                file(rest, None)
            } else {
                Err(PortError::BadUri {
                    uri: rest.clone(),
                    why: "not a file; name a port as mem:NAME, pcap:FILE, pcapng:FILE or \
                          afpacket:IFACE"
                        .into(),
                })
            }
        }
        Uri::List(_) => Err(PortError::BadUri {
            uri: uri.to_string(),
            why: "a list inside a list".into(),
        }),
    }
}
