//! Port names parsed once: [`Uri`] is what a port URI says (`mem:w0`, `pcap:FILE`,
//! `pcapng:FILE`, a bare file name, `afpacket:IFACE`, `xdp:IFACE[@QUEUES]`, `cluster:ID@Q`, and
//! lists `a,b`), so that callers ask it instead of taking the string apart again. Parsing reads
//! nothing: whether a bare name is a file, or an interface has the queues named, is found out
//! when the port is opened.

use std::fmt;

use super::pcap::WriteFormat;
use super::xdp::{self, Queues};
use super::PortError;

/// A parsed port URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Uri {
    /// `mem:NAME`: an in-process wire.
    Mem(String),
    /// `pcap:FILE` (`format` None: written in the format of its name or `--format`) or
    /// `pcapng:FILE` (`format` pcapng: written as pcapng whatever the name).
    File {
        /// The file (`-` is standard input or output).
        path: String,
        /// The format it is written in, when the scheme names one.
        format: Option<WriteFormat>,
    },
    /// A name without a scheme: a capture file if it is one (or is named `*.pcap`,
    /// `*.pcapng`, `-`, or is written with a named format); anything else is refused at open.
    Bare(String),
    /// `afpacket:IFACE`: a TPACKET_V3 socket on an interface.
    AfPacket(String),
    /// `xdp:IFACE[@QUEUES]`: AF_XDP sockets on the interface's receive queues.
    Xdp {
        /// The interface.
        iface: String,
        /// Which queues (every one when none is named).
        queues: Queues,
    },
    /// `cluster:ID@Q` (or another of the cluster's forms): a queue of a `balance` cluster.
    Cluster(String),
    /// `a,b,...`: several ports read as one.
    List(Vec<Uri>),
}

impl Uri {
    /// Parses `s`; a bad name is [`PortError::BadUri`] saying what to write instead.
    pub fn parse(s: &str) -> Result<Uri, PortError> {
        if s.contains(',') {
            let mut list = Vec::new();
            for p in s.split(',') {
                if p.is_empty() {
                    return Err(PortError::BadUri {
                        uri: s.into(),
                        why: "empty name in a list of ports (write a,b)".into(),
                    });
                }
                list.push(Uri::parse(p)?);
            }
            return Ok(Uri::List(list));
        }
        let (scheme, rest) = match s.split_once(':') {
            Some((sc, r))
                if ["mem", "pcap", "pcapng", "afpacket", "xdp", "cluster"].contains(&sc) =>
            {
                (sc, r)
            }
            _ => ("", s),
        };
        if rest.is_empty() {
            let what = if s.is_empty() {
                "an empty port name"
            } else {
                "no name after the scheme"
            };
            return Err(PortError::BadUri {
                uri: s.into(),
                why: format!("{what} (e.g. mem:w0, pcap:file.pcap, afpacket:eth0)"),
            });
        }
        Ok(match scheme {
            "mem" => Uri::Mem(rest.into()),
            "pcap" => Uri::File {
                path: rest.into(),
                format: None,
            },
            "pcapng" => Uri::File {
                path: rest.into(),
                format: Some(WriteFormat::PcapNg),
            },
            "afpacket" => Uri::AfPacket(rest.into()),
            "xdp" => {
                let (iface, queues) = xdp::parse_name(rest)?;
                if iface.is_empty() {
                    return Err(PortError::BadUri {
                        uri: s.into(),
                        why: "no interface before '@' (write xdp:IFACE@Q)".into(),
                    });
                }
                Uri::Xdp {
                    iface: iface.into(),
                    queues,
                }
            }
            "cluster" => Uri::Cluster(rest.into()),
            _ => Uri::Bare(rest.into()),
        })
    }

    /// The interface of a kernel port (`afpacket:` or `xdp:`, not a list).
    pub fn iface(&self) -> Option<&str> {
        match self {
            Uri::AfPacket(i) | Uri::Xdp { iface: i, .. } => Some(i),
            _ => None,
        }
    }

    /// The interface of an `xdp:IFACE` port that names no queue (every queue of it).
    pub fn xdp_whole(&self) -> Option<&str> {
        match self {
            Uri::Xdp {
                iface,
                queues: Queues::All,
            } => Some(iface),
            _ => None,
        }
    }

    /// Whether it is an `xdp:` port (one interface, any queues).
    pub fn is_xdp(&self) -> bool {
        matches!(self, Uri::Xdp { .. })
    }

    /// Whether it names capture files only (`pcap:`, `pcapng:`, a bare name, or a list of
    /// them): packets whose times are the file's, not the run's.
    pub fn is_file(&self) -> bool {
        match self {
            Uri::File { .. } | Uri::Bare(_) => true,
            Uri::List(l) => l.iter().all(Uri::is_file),
            _ => false,
        }
    }

    /// Whether it reads a live interface (`afpacket:` or `xdp:`, or a list with one).
    pub fn is_live(&self) -> bool {
        match self {
            Uri::AfPacket(_) | Uri::Xdp { .. } => true,
            Uri::List(l) => l.iter().any(Uri::is_live),
            _ => false,
        }
    }

    /// The members of a list, or itself.
    pub fn members(&self) -> &[Uri] {
        match self {
            Uri::List(l) => l,
            one => std::slice::from_ref(one),
        }
    }
}

impl std::str::FromStr for Uri {
    type Err = PortError;

    fn from_str(s: &str) -> Result<Uri, PortError> {
        Uri::parse(s)
    }
}

impl fmt::Display for Uri {
    /// The URI as it is written (parsing it gives the same [`Uri`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uri::Mem(n) => write!(f, "mem:{n}"),
            Uri::File { path, format: None } => write!(f, "pcap:{path}"),
            Uri::File {
                path,
                format: Some(WriteFormat::PcapNg),
            } => write!(f, "pcapng:{path}"),
            Uri::File {
                path,
                format: Some(WriteFormat::Pcap),
            } => write!(f, "pcap:{path}"),
            Uri::Bare(p) => f.write_str(p),
            Uri::AfPacket(i) => write!(f, "afpacket:{i}"),
            Uri::Xdp {
                iface,
                queues: Queues::All,
            } => write!(f, "xdp:{iface}"),
            Uri::Xdp {
                iface,
                queues: Queues::Range(a, b),
            } if a == b => write!(f, "xdp:{iface}@{a}"),
            Uri::Xdp {
                iface,
                queues: Queues::Range(a, b),
            } => write!(f, "xdp:{iface}@{a}-{b}"),
            Uri::Cluster(s) => write!(f, "cluster:{s}"),
            Uri::List(l) => {
                for (i, u) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{u}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_writes_back() {
        for s in [
            "mem:w0",
            "pcap:a.pcap",
            "pcapng:x",
            "out.pcap",
            "-",
            "afpacket:eth0",
            "xdp:eth0",
            "xdp:eth0@3",
            "xdp:eth0@0-3",
            "cluster:7@1",
            "mem:a,afpacket:b,xdp:c@2",
        ] {
            let u = Uri::parse(s).unwrap();
            assert_eq!(u.to_string(), s, "{u:?}");
            assert_eq!(Uri::parse(&u.to_string()).unwrap(), u);
        }
        // Another spelling of every queue writes back as the plain name.
        assert_eq!(Uri::parse("xdp:eth0@all").unwrap().to_string(), "xdp:eth0");
        assert_eq!(Uri::parse("xdp:eth0@*").unwrap().xdp_whole(), Some("eth0"));
    }

    #[test]
    fn what_callers_ask() {
        let u = Uri::parse("xdp:veth1@2").unwrap();
        assert_eq!(u.iface(), Some("veth1"));
        assert_eq!(u.xdp_whole(), None);
        assert!(u.is_xdp() && u.is_live());
        let l = Uri::parse("pcap:a,afpacket:b").unwrap();
        assert_eq!(l.members().len(), 2);
        assert!(l.is_live() && l.iface().is_none());
        assert!(!Uri::parse("mem:x").unwrap().is_live());
    }

    #[test]
    fn bad_names_say_what_to_write() {
        for (s, says) in [
            ("mem:", "no name after the scheme"),
            ("", "an empty port name"),
            ("a,,b", "empty name in a list"),
            ("xdp:eth0@x", "not a number"),
            ("xdp:eth0@3-1", "is empty"),
            ("xdp:@1", "no interface"),
        ] {
            let e = Uri::parse(s).unwrap_err().to_string();
            assert!(e.contains(says), "{s}: {e}");
        }
    }
}
