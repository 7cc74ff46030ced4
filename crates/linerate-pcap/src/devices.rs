//! The devices `pcap_findalldevs` adds to the system's (listed after them): the queues of the
//! running clusters (`cluster:ID@Q`), then each interface as `afpacket:IF` and, when it has
//! AF_XDP queues, `xdp:IF` (all its queues) — the same sources `linerate count -D` lists.

use linerate::port::sources;

/// One device to list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Its name, a linerate port URI.
    pub name: String,
    /// What it is, in words.
    pub description: String,
    /// Up.
    pub up: bool,
    /// Running.
    pub running: bool,
    /// Loopback.
    pub loopback: bool,
}

/// The devices, clusters first.
pub fn list() -> Vec<Device> {
    let mut v: Vec<Device> = sources::cluster_queues()
        .into_iter()
        .map(|c| Device {
            name: c.uri(),
            description: format!(
                "linerate cluster {} queue {} (application {}, master pid {})",
                c.id, c.queue, c.app, c.master_pid
            ),
            up: true,
            running: true,
            loopback: false,
        })
        .collect();
    for i in sources::interfaces() {
        v.push(Device {
            name: format!("afpacket:{}", i.name),
            description: format!("linerate AF_PACKET (TPACKET_V3) on {}", i.name),
            up: i.up,
            running: i.running,
            loopback: i.loopback,
        });
        if i.xdp_queues > 0 {
            v.push(Device {
                name: format!("xdp:{}", i.name),
                description: format!(
                    "linerate AF_XDP on {} (queues 0-{}; one: xdp:{}@Q)",
                    i.name,
                    i.xdp_queues - 1,
                    i.name
                ),
                up: i.up,
                running: i.running,
                loopback: i.loopback,
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_listed_device_is_a_linerate_name() {
        for d in super::list() {
            assert!(crate::names::owns(&d.name), "{}", d.name);
            assert!(!d.description.is_empty());
        }
    }
}
