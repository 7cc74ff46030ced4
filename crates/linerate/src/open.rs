//! Opening a port from its URI: the one place that knows every kind of port, the cluster's
//! consumer (`cluster:ID@Q`, in [`crate::cluster`]) included, so that `port` and `cluster` do
//! not import each other. Re-exported at the crate root: `linerate::open_rx("xdp:eth0", ...)`.

use crate::port::xdp::XdpPort;
use crate::port::{
    afpacket, mem, pcap, xdp, Aggregate, Direction, LinkType, Port, PortError, PortOptions,
    PortStats, Uri,
};
use std::fmt;

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

/// Opens the input of a cluster `master` (`linerate balance -i`): an `xdp:` input (one
/// interface, any of its queues) gets the segment's frames as its UMEM
/// ([`crate::cluster::Master::umem_area`]), so the kernel writes each packet where consumers
/// read it and the master copies nothing. A `mem:NAME` wire opened here first is made over the
/// segment's frames ([`crate::cluster::Master::input_wire`]): the thread that opens `mem:NAME`
/// next gets the writing end, which allocates from the segment, and the master copies nothing
/// either. Any other input opens as [`open_rx`] would.
///
/// The second value says why an `xdp:` or `mem:` input could not use the segment and is copied
/// into it instead (the frames are not laid out as a UMEM's, the kernel refused them, the wire
/// was made before the master): the caller shows it, so that a copy is never silent.
pub fn open_cluster_input(
    uri: &str,
    opts: &PortOptions,
    master: &mut crate::cluster::Master,
) -> Result<(Box<dyn Port>, Option<String>), PortError> {
    let parsed = Uri::parse(uri)?;
    if let Uri::Mem(name) = &parsed {
        let why = match mem::MemPort::make_and_offer(name, || master.input_wire(name)) {
            Some(Ok(ours)) => return Ok((Box::new(ours), None)),
            Some(Err(why)) => why,
            None => "the wire was opened before the master (its writer allocates from its own \
                     frames)"
                .to_string(),
        };
        return Ok((
            open_rx(uri, opts)?,
            Some(format!(
                "{uri}: each packet is copied into the cluster once: {why}"
            )),
        ));
    }
    let Uri::Xdp { iface, queues } = parsed else {
        return Ok((open_rx(uri, opts)?, None));
    };
    let sockets = xdp::queue_count_of(&iface, queues)?;
    let why = match master.umem_area(sockets) {
        Ok(area) => match xdp::open_in_area(&iface, queues, opts, &opts.xdp, &area) {
            Ok(p) => return Ok((p, None)),
            Err(e) => format!("the kernel did not take the cluster's frames as its UMEM ({e})"),
        },
        Err(why) => why,
    };
    let p = open_rx(uri, opts)?;
    Ok((
        p,
        Some(format!(
            "{uri}: each packet is copied into the cluster once: {why}"
        )),
    ))
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

/// Which port of a forwarding pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The port read from (`fwd -i`).
    Input,
    /// The port written to (`fwd -o`).
    Output,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Input => "input",
            Side::Output => "output",
        })
    }
}

/// A port of a forwarding pair that did not open: which one, its URI, and why.
#[derive(Debug, thiserror::Error)]
#[error("{side} {uri}: {source}")]
pub struct PairError {
    /// The port that failed.
    pub side: Side,
    /// Its URI.
    pub uri: String,
    /// Why.
    pub source: PortError,
}

/// A forwarder's two ports, as [`open_pair`] opens them.
pub struct Pair {
    /// The port read from.
    pub input: Box<dyn Port>,
    /// The port written to.
    pub output: Box<dyn Port>,
    /// Both are `xdp:` ports on one UMEM: a received frame is sent without a copy.
    pub shared_umem: bool,
    /// The input's counters per interface ([`Port::interface_stats`]) read as soon as it
    /// opened, before the output:
    /// an output may wait in its open (a FIFO until its reader comes) while the input drops
    /// what it cannot hold, and a run counts those drops from here (as tcpdump's counters
    /// start at pcap_activate, before it opens its -w file).
    pub input_start: Vec<PortStats>,
}

/// A forwarder's two ports as their paths apart (a thread per input queue), as
/// [`open_pair_parts`] opens them.
pub struct PairParts {
    /// The input's paths: its queues, or the members of a list.
    pub input: Vec<Box<dyn Port>>,
    /// The output's paths.
    pub output: Vec<Box<dyn Port>>,
    /// Both are `xdp:` ports on one UMEM: a received frame is sent without a copy.
    pub shared_umem: bool,
}

/// Opens a forwarder's input (to receive) and output (to send), what `linerate fwd -i IN -o
/// OUT` forwards between. When both are `xdp:` ports (not lists), every queue of both
/// interfaces is put on one UMEM sized for all of their rings, so that a received frame is
/// sent without a copy; when the kernel refuses to share (different drivers, copy mode), the
/// output gets a UMEM of its own and [`Pair::shared_umem`] says so. Any other ports open as
/// [`open`] opens them. One port both ways (a bounce) is one [`open`].
pub fn open_pair(input: &str, output: &str, opts: &PortOptions) -> Result<Pair, PairError> {
    if let Some((p0, p1, shared_umem)) = open_xdp_pair(input, Some(output), opts, opts.rx_wait_ms)?
    {
        let mut input = xdp::join(input, p0, opts.rx_wait_ms);
        let input_start = input.interface_stats();
        return Ok(Pair {
            input,
            output: xdp::join(output, p1, opts.rx_wait_ms),
            shared_umem,
            input_start,
        });
    }
    let mut input = open(input, opts, Direction::Rx).map_err(pair_error(Side::Input, input))?;
    let input_start = input.interface_stats();
    // A file output is labelled with the input's link type: its frames are the input's.
    let out_opts = PortOptions {
        link_type: opts.link_type.or(Some(input.link_type())),
        ..opts.clone()
    };
    Ok(Pair {
        input,
        output: open(output, &out_opts, Direction::Tx).map_err(pair_error(Side::Output, output))?,
        shared_umem: false,
        input_start,
    })
}

/// [`open_pair`] with each port's paths apart, as [`open_parts`] gives them (a forwarding
/// thread per queue pair). The queues of `xdp:` ports never wait in `rx`: whoever reads
/// several polls them together. When `output` is `input` (a bounce: packets go back out of
/// the queue they came in on) only the input is opened and [`PairParts::output`] is empty; an
/// `xdp:` input's queues then send what they receive from their own UMEM, without a copy, and
/// [`PairParts::shared_umem`] says so.
pub fn open_pair_parts(
    input: &str,
    output: &str,
    opts: &PortOptions,
) -> Result<PairParts, PairError> {
    if input == output {
        if let Some((p0, _, _)) = open_xdp_pair(input, None, opts, 0)? {
            return Ok(PairParts {
                input: boxed(p0),
                output: Vec::new(),
                shared_umem: true,
            });
        }
        return Ok(PairParts {
            input: open_parts(input, opts, Direction::Rx)
                .map_err(pair_error(Side::Input, input))?,
            output: Vec::new(),
            shared_umem: false,
        });
    }
    if let Some((p0, p1, shared_umem)) = open_xdp_pair(input, Some(output), opts, 0)? {
        return Ok(PairParts {
            input: boxed(p0),
            output: boxed(p1),
            shared_umem,
        });
    }
    Ok(PairParts {
        input: open_parts(input, opts, Direction::Rx).map_err(pair_error(Side::Input, input))?,
        output: open_parts(output, opts, Direction::Tx)
            .map_err(pair_error(Side::Output, output))?,
        shared_umem: false,
    })
}

fn pair_error(side: Side, uri: &str) -> impl FnOnce(PortError) -> PairError + '_ {
    move |source| PairError {
        side,
        uri: uri.to_string(),
        source,
    }
}

fn boxed(ports: Vec<XdpPort>) -> Vec<Box<dyn Port>> {
    ports
        .into_iter()
        .map(|p| Box::new(p) as Box<dyn Port>)
        .collect()
}

/// The input's and the output's queues, and whether they share one UMEM.
type XdpPair = (Vec<XdpPort>, Vec<XdpPort>, bool);

/// Input and output queues of two `xdp:` ports (None when either is something else), the
/// output on the input's UMEM when the kernel allows (the flag says whether it did); queues
/// of a single-queue port wait up to `wait_ms` in `rx`. Without an output (a bounce) only the
/// input's queues are opened, on a UMEM sized as it would be for both.
fn open_xdp_pair(
    input: &str,
    output: Option<&str>,
    opts: &PortOptions,
    wait_ms: u32,
) -> Result<Option<XdpPair>, PairError> {
    let Ok(Uri::Xdp {
        iface: i,
        queues: qi,
    }) = Uri::parse(input)
    else {
        return Ok(None);
    };
    let out = match output.map(Uri::parse) {
        None => None,
        Some(Ok(Uri::Xdp { iface, queues })) => Some((iface, queues)),
        Some(_) => return Ok(None),
    };
    let cfg = &opts.xdp;
    let mut nq = xdp::queue_count_of(&i, qi).map_err(pair_error(Side::Input, input))?;
    if let (Some((o, qo)), Some(uri)) = (&out, output) {
        nq += xdp::queue_count_of(o, *qo).map_err(pair_error(Side::Output, uri))?;
    }
    let own = PortOptions {
        rx_wait_ms: wait_ms,
        ..opts.clone()
    };
    // Every queue of both interfaces on one UMEM, sized for all of their rings.
    let big = PortOptions {
        frames: opts.frames.max(
            xdp::umem_frames(nq, cfg.ring_size).saturating_add(cfg.ring_size.saturating_mul(2)),
        ),
        ..own.clone()
    };
    let p0 =
        xdp::open_queues_of(&i, qi, &big, cfg, None).map_err(pair_error(Side::Input, input))?;
    let (Some((o, qo)), Some(uri)) = (out, output) else {
        return Ok(Some((p0, Vec::new(), true)));
    };
    match p0
        .first()
        .map(|first| xdp::open_queues_of(&o, qo, &big, cfg, Some(first)))
    {
        Some(Ok(p1)) => Ok(Some((p0, p1, true))),
        _ => {
            let p1 = xdp::open_queues_of(&o, qo, &own, cfg, None)
                .map_err(pair_error(Side::Output, uri))?;
            Ok(Some((p0, p1, false)))
        }
    }
}

/// Opens one port (not a list).
fn open_one(uri: &Uri, opts: &PortOptions, dir: Direction) -> Result<Box<dyn Port>, PortError> {
    let file =
        |path: &str, format: Option<pcap::WriteFormat>| -> Result<Box<dyn Port>, PortError> {
            Ok(Box::new(match dir {
                Direction::Rx => pcap::PcapPort::open(path, opts)?,
                // Records are written whole (up to libpcap's 256 KiB): the file's snaplen is the
                // largest a reader accepts, not the capture ports' default.
                Direction::Tx => pcap::PcapPort::create_with_options(
                    path,
                    format.or(opts.write_format),
                    opts.link_type.unwrap_or(LinkType::ETHERNET),
                    0,
                    &opts.inputs,
                    &opts.write,
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
        // tcpdump's `-i any`: every interface, unless a file is named so.
        Uri::Bare(rest)
            if dir == Direction::Rx
                && rest == afpacket::ANY
                && !std::path::Path::new(rest).exists() =>
        {
            Ok(Box::new(afpacket::AfPacket::open(rest, opts)?))
        }
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
                    why: bare_name_hint(rest, crate::sys::iface::ifindex(rest).is_some()),
                })
            }
        }
        Uri::List(_) => Err(PortError::BadUri {
            uri: uri.to_string(),
            why: "a list inside a list".into(),
        }),
    }
}

/// The port schemes, as a user writes them.
pub const PORT_FORMS: &str =
    "mem:NAME, pcap:FILE, pcapng:FILE, afpacket:IFACE, xdp:IFACE[@QUEUES] or cluster:ID@Q";

/// Why a bare name that is no file is refused, naming the fix: an interface (`is_iface`) is
/// `afpacket:IF` or `xdp:IF` (tcpdump takes `-i eth0`; linerate asks which socket), a scheme
/// one or two letters off (`afpakcet:eth0`) is the scheme it is closest to.
pub fn bare_name_hint(name: &str, is_iface: bool) -> String {
    if is_iface {
        return format!(
            "not a file but an interface: did you mean afpacket:{name} (AF_PACKET, as tcpdump \
             -i {name}) or xdp:{name} (AF_XDP, every queue)?"
        );
    }
    if let Some((scheme, rest)) = name.split_once(':') {
        const SCHEMES: [&str; 6] = ["mem", "pcap", "pcapng", "afpacket", "xdp", "cluster"];
        let near = SCHEMES
            .iter()
            .map(|s| (edit_distance(&scheme.to_ascii_lowercase(), s), *s))
            .filter(|&(d, s)| d <= 2.min(s.len() / 2))
            .min();
        if let Some((_, s)) = near {
            return format!("unknown scheme '{scheme}:': did you mean {s}:{rest}?");
        }
        return format!("unknown scheme '{scheme}:' and not a file; name a port as {PORT_FORMS}");
    }
    format!("not a file; name a port as {PORT_FORMS}")
}

/// Edit distance between two short names: insertions, deletions, substitutions and swaps of
/// two neighbours (`xpd` is one from `xdp`), each 1.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, v) in d[0].iter_mut().enumerate() {
        *v = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn a_bare_interface_name_is_offered_as_afpacket_and_xdp() {
        let why = super::bare_name_hint("eth0", true);
        assert!(why.contains("did you mean afpacket:eth0"), "{why}");
        assert!(why.contains("xdp:eth0"), "{why}");
    }

    #[test]
    fn a_scheme_typo_is_offered_the_nearest_scheme() {
        let why = super::bare_name_hint("afpakcet:eth0", false);
        assert!(why.contains("did you mean afpacket:eth0?"), "{why}");
        let why = super::bare_name_hint("XDP:eth0", false);
        assert!(why.contains("did you mean xdp:eth0?"), "{why}");
        let why = super::bare_name_hint("xpd:eth0", false);
        assert!(why.contains("did you mean xdp:eth0?"), "{why}");
        let why = super::bare_name_hint("clustr:10@0", false);
        assert!(why.contains("did you mean cluster:10@0?"), "{why}");
        // Far from every scheme: the list of forms, with xdp: and cluster:.
        let why = super::bare_name_hint("http:x", false);
        assert!(
            why.contains("xdp:IFACE") && why.contains("cluster:ID@Q"),
            "{why}"
        );
        let why = super::bare_name_hint("nosuchthing", false);
        assert!(
            why.contains("xdp:IFACE") && why.contains("cluster:ID@Q"),
            "{why}"
        );
    }

    use super::*;
    use crate::mem::{Batch, Desc};

    #[test]
    fn a_pair_of_mem_ports_forwards_one_way() {
        let opts = PortOptions::default();
        let mut pair = open_pair("mem:pair-in", "mem:pair-out", &opts).unwrap();
        assert!(!pair.shared_umem);
        // The other ends: one feeds the input, one reads what the output sends.
        let mut feed = open("mem:pair-in", &opts, Direction::Tx).unwrap();
        let mut sink = open("mem:pair-out", &opts, Direction::Rx).unwrap();
        let mut b = Batch::with_pool(feed.pool().unwrap());
        for i in 0..3u8 {
            let mut fr = b.alloc().unwrap();
            fr.buf()[..60].fill(i);
            fr.push(Desc {
                len: 60,
                wire_len: 60,
                ..Default::default()
            });
        }
        assert_eq!(feed.tx(&mut b).unwrap(), 3);
        let mut b = Batch::new();
        assert_eq!(pair.input.rx(&mut b).unwrap(), 3);
        assert_eq!(pair.output.tx(&mut b).unwrap(), 3);
        let mut got = Batch::new();
        assert_eq!(sink.rx(&mut got).unwrap(), 3);
        for (i, p) in got.iter().enumerate() {
            assert!(p.data.len() == 60 && p.data.iter().all(|&x| x == i as u8));
        }
    }

    #[test]
    fn pair_errors_name_the_side_that_failed() {
        let opts = PortOptions::default();
        let e = open_pair("not-a-port", "mem:pe-out", &opts).err().unwrap();
        assert_eq!((e.side, e.uri.as_str()), (Side::Input, "not-a-port"));
        assert!(matches!(e.source, PortError::BadUri { .. }), "{e}");
        assert!(
            e.to_string().starts_with("input not-a-port: bad port"),
            "{e}"
        );
        let e = open_pair("mem:pe-in", "not-a-port", &opts).err().unwrap();
        assert_eq!(e.side, Side::Output);
        // Two xdp: ports: both interfaces are looked up before any socket is opened, so a
        // missing output is reported as the output's, whoever runs this.
        let e = open_pair("xdp:lo", "xdp:linerate-none0", &opts)
            .err()
            .unwrap();
        assert_eq!(
            (e.side, e.uri.as_str()),
            (Side::Output, "xdp:linerate-none0")
        );
        let e = open_pair_parts("xdp:linerate-none0", "xdp:lo", &opts)
            .err()
            .unwrap();
        assert_eq!(e.side, Side::Input);
    }

    #[test]
    fn pair_parts_keep_every_path_apart() {
        let opts = PortOptions::default();
        let parts = open_pair_parts("mem:pp-a,mem:pp-b", "mem:pp-c", &opts).unwrap();
        assert_eq!((parts.input.len(), parts.output.len()), (2, 1));
        assert!(!parts.shared_umem);
        // A bounce opens its port once: the input's paths, no output.
        let parts = open_pair_parts("mem:pp-d,mem:pp-e", "mem:pp-d,mem:pp-e", &opts).unwrap();
        assert_eq!((parts.input.len(), parts.output.len()), (2, 0));
        assert!(!parts.shared_umem);
        let e = open_pair_parts("xdp:linerate-none0", "xdp:linerate-none0", &opts)
            .err()
            .unwrap();
        assert_eq!(e.side, Side::Input);
    }
}
