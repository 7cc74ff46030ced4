//! Counters the kernel shows in /proc: per-CPU softnet statistics (`/proc/net/softnet_stat`)
//! and interrupts per CPU (`/proc/interrupts`). Both are the same in every network namespace.
//! Parsers take the text and never panic on a damaged one.

/// One CPU's line of `/proc/net/softnet_stat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Softnet {
    /// CPU number.
    pub cpu: u32,
    /// Packets the CPU's receive path processed.
    pub processed: u32,
    /// Packets dropped because the CPU's backlog queue was full (`netdev_max_backlog`).
    pub dropped: u32,
    /// Times the receive softirq ran out of budget or time with work left (`time_squeeze`).
    pub time_squeeze: u32,
}

/// Parses `/proc/net/softnet_stat` (hexadecimal columns; the CPU number is the 13th column on
/// kernels that print it, else the line's position).
pub fn parse_softnet(text: &str) -> Vec<Softnet> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let cols: Vec<u32> = line
            .split_whitespace()
            .map_while(|c| u32::from_str_radix(c, 16).ok())
            .collect();
        if cols.len() < 3 {
            continue;
        }
        out.push(Softnet {
            cpu: cols.get(12).copied().unwrap_or(i as u32),
            processed: cols[0],
            dropped: cols[1],
            time_squeeze: cols[2],
        });
    }
    out
}

/// Reads `/proc/net/softnet_stat`.
pub fn softnet() -> std::io::Result<Vec<Softnet>> {
    Ok(parse_softnet(&std::fs::read_to_string(
        "/proc/net/softnet_stat",
    )?))
}

/// One numbered interrupt line of `/proc/interrupts`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Irq {
    /// Interrupt number.
    pub irq: u32,
    /// Count per CPU (CPU numbers from the header line).
    pub per_cpu: Vec<(u32, u32)>,
    /// The chip and hardware columns ("PCI-MSIX-0000:00:03.0 1-edge").
    pub chip: String,
    /// The handler names ("virtio2-input.0", "eth0-TxRx-3").
    pub name: String,
}

/// Parses `/proc/interrupts` (numbered lines only).
pub fn parse_interrupts(text: &str) -> Vec<Irq> {
    let mut lines = text.lines();
    let cpus: Vec<u32> = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|c| c.strip_prefix("CPU")?.parse().ok())
        .collect();
    let mut out = Vec::new();
    for line in lines {
        let Some((label, rest)) = line.split_once(':') else {
            continue;
        };
        let Ok(irq) = label.trim().parse::<u32>() else {
            continue;
        };
        let mut words = rest.split_whitespace().peekable();
        let mut per_cpu = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            match words.peek().and_then(|w| w.parse::<u32>().ok()) {
                Some(n) => {
                    per_cpu.push((cpu, n));
                    words.next();
                }
                None => break,
            }
        }
        let tail: Vec<&str> = words.collect();
        // Chip name and hardware IRQ ("PCI-MSIX-0000:00:03.0 1-edge"), then the handlers.
        let split = tail.len().min(2);
        out.push(Irq {
            irq,
            per_cpu,
            chip: tail[..split].join(" "),
            name: tail[split..].join(" "),
        });
    }
    out
}

/// Reads `/proc/interrupts`.
pub fn interrupts() -> std::io::Result<Vec<Irq>> {
    Ok(parse_interrupts(&std::fs::read_to_string(
        "/proc/interrupts",
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softnet_lines() {
        let t = "006dec0d 00000000 00000002 00000000 00000000 00000000 00000000 00000000 \
                 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n\
                 006a0f02 0000000a 00000010 00000000 00000000 00000000 00000000 00000000 \
                 00000000 00000000 00000000 00000000 00000003 00000000 00000000\n\
                 garbage\n";
        let s = parse_softnet(t);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].cpu, 0);
        assert_eq!(s[0].processed, 0x6dec0d);
        assert_eq!(s[0].time_squeeze, 2);
        assert_eq!((s[1].cpu, s[1].dropped, s[1].time_squeeze), (3, 10, 16));
        // Old kernels without the CPU column: the line's position.
        assert_eq!(parse_softnet("1 2 3\n4 5 6\n")[1].cpu, 1);
    }

    #[test]
    fn interrupt_lines() {
        let t = "           CPU0       CPU1       \n\
                 \x20 26:          0         13  IO-APIC   4-edge      ttyS0\n\
                 \x20 38:          0       5611 PCI-MSIX-0000:00:03.0   1-edge      virtio2-input.0\n\
                 NMI:          0          0   Non-maskable interrupts\n\
                 ERR:          0\n\
                 \x20 99:          7\n";
        let v = parse_interrupts(t);
        assert_eq!(v.len(), 3);
        assert_eq!(v[1].irq, 38);
        assert_eq!(v[1].per_cpu, vec![(0, 0), (1, 5611)]);
        assert_eq!(v[1].chip, "PCI-MSIX-0000:00:03.0 1-edge");
        assert_eq!(v[1].name, "virtio2-input.0");
        assert_eq!(v[2].per_cpu, vec![(0, 7)]);
        assert!(parse_interrupts("").is_empty());
    }
}
