//! What can be captured here (`count -D`, tcpdump's `-D`; `pcap_findalldevs` in
//! liblinerate_pcap.so): the interfaces of this network namespace, each an `afpacket:IF` with
//! its AF_XDP queues, and the queues of the clusters running on this machine.

/// An interface of this network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    /// Its index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// IFF_UP.
    pub up: bool,
    /// Up with a carrier (IFF_RUNNING is not in the sysfs flags: the carrier is).
    pub running: bool,
    /// IFF_LOOPBACK.
    pub loopback: bool,
    /// Its receive queues an `xdp:` port can open (0: none known).
    pub xdp_queues: usize,
}

impl Iface {
    /// Its flags in tcpdump's words (`Up, Running, Loopback`).
    pub fn words(&self) -> String {
        let mut w = Vec::new();
        if self.up {
            w.push("Up");
        }
        if self.running {
            w.push("Running");
        }
        if self.loopback {
            w.push("Loopback");
        }
        w.join(", ")
    }
}

/// A queue of a running cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterQueue {
    /// The cluster id.
    pub id: u32,
    /// The queue.
    pub queue: usize,
    /// The application (the group of `-n`) it belongs to.
    pub app: usize,
    /// The master's pid.
    pub master_pid: u32,
}

impl ClusterQueue {
    /// Its port URI, `cluster:ID@Q`.
    pub fn uri(&self) -> String {
        format!("cluster:{}@{}", self.id, self.queue)
    }
}

/// The interfaces of this network namespace, by index.
pub fn interfaces() -> Vec<Iface> {
    let mut v: Vec<Iface> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let index = std::fs::read_to_string(e.path().join("ifindex"))
                        .ok()?
                        .trim()
                        .parse()
                        .ok()?;
                    Some(describe(index, name))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|i| i.index);
    v
}

fn describe(index: u32, name: String) -> Iface {
    let flags = std::fs::read_to_string(format!("/sys/class/net/{name}/flags"))
        .ok()
        .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let up = flags & libc::IFF_UP as u32 != 0;
    let carrier = std::fs::read_to_string(format!("/sys/class/net/{name}/carrier"));
    let xdp_queues = super::xdp::queue_count_of(&name, super::xdp::Queues::All).unwrap_or(0);
    Iface {
        index,
        up,
        running: up && carrier.is_ok_and(|c| c.trim() == "1"),
        loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
        xdp_queues,
        name,
    }
}

/// Ids of the clusters whose segment files are in the shared-memory directory or a mounted
/// hugetlbfs.
pub fn cluster_ids() -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::new();
    for dir in crate::cluster::segment_dirs() {
        let Ok(d) = std::fs::read_dir(&dir) else {
            continue;
        };
        ids.extend(d.filter_map(Result::ok).filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix("linerate-cluster-")?
                .parse::<u32>()
                .ok()
        }));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The queues of the clusters whose master runs (a segment left by a dead master is not
/// listed), by cluster id and queue.
pub fn cluster_queues() -> Vec<ClusterQueue> {
    let mut out = Vec::new();
    for id in cluster_ids() {
        let Ok(seg) = crate::cluster::Segment::open(id) else {
            continue;
        };
        for queue in 0..seg.queues() {
            out.push(ClusterQueue {
                id,
                queue,
                app: seg.app_of(queue),
                master_pid: seg.master_pid(),
            });
        }
    }
    out
}
