use super::*;
use crate::port::pcap::PcapWriter;

fn eth(t: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    f.extend_from_slice(&t.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ip4(src: [u8; 4], dst: [u8; 4], proto: u8, frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 0];
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(l4);
    h
}

fn ip6(src: [u8; 16], dst: [u8; 16], nh: u8, rest: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0, 0, 0, nh, 64];
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(rest);
    h
}

fn ports(s: u16, d: u16) -> Vec<u8> {
    let mut p = s.to_be_bytes().to_vec();
    p.extend_from_slice(&d.to_be_bytes());
    p.extend_from_slice(&[0; 16]);
    p
}

fn one(link: LinkType, f: &[u8]) -> FileIndex {
    let mut w = IndexWriter::new(link);
    w.on_packet(24, 16 + f.len() as u64, 1, f);
    w.finish()
}

fn has(x: &FileIndex, k: Key) -> bool {
    x.lookup(&k).contains(0)
}

#[test]
fn blockset_ops() {
    let mut a = BlockSet::new_empty(130);
    a.insert(0);
    a.insert(129);
    a.insert(500);
    assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 129]);
    let all = BlockSet::all(130);
    assert_eq!(all.count(), 130);
    assert_eq!(all.clone().and(&a), a);
    assert_eq!(a.clone().complement().count(), 128);
    assert_eq!(a.clone().or(&all), all);
    assert!(BlockSet::new_empty(3).is_empty());
    assert_eq!(a.len(), 130);
}

#[test]
fn vlan_qinq_ipv4_udp() {
    let inner = eth(
        0x0800,
        &ip4([10, 0, 0, 1], [10, 0, 0, 2], 17, 0, &ports(53, 4000)),
    );
    // Two tags: 802.1ad 100 then 802.1Q 200.
    let mut f = inner[..12].to_vec();
    f.extend_from_slice(&[0x88, 0xa8, 0x00, 100, 0x81, 0x00, 0x00, 200]);
    f.extend_from_slice(&inner[12..]);
    let x = one(LinkType::ETHERNET, &f);
    for k in [
        Key::Tagged,
        Key::Vlan(100),
        Key::Vlan(200),
        Key::EtherType(0x0800),
        Key::Ip4([10, 0, 0, 1]),
        Key::Ip4([10, 0, 0, 2]),
        Key::Proto(17),
        Key::Port(53),
        Key::Port(4000),
    ] {
        assert!(has(&x, k), "{k:?}");
    }
    assert!(!has(&x, Key::Port(80)));
    assert!(x.opaque().is_empty());
}

#[test]
fn ipv4_fragments_post_ports_only_first() {
    let first = eth(
        0x0800,
        &ip4([1, 1, 1, 1], [2, 2, 2, 2], 6, 0x2000, &ports(80, 81)),
    );
    let later = eth(
        0x0800,
        &ip4([1, 1, 1, 1], [2, 2, 2, 2], 6, 0x0010, &ports(90, 91)),
    );
    assert!(has(&one(LinkType::ETHERNET, &first), Key::Port(81)));
    let x = one(LinkType::ETHERNET, &later);
    assert!(!has(&x, Key::Port(90)));
    assert!(has(&x, Key::Proto(6)));
}

#[test]
fn ipv6_extension_chain_and_fragment() {
    let (s, d) = ([0x20; 16], [0x30; 16]);
    // Hop-by-hop (8 bytes), fragment (first), then TCP.
    let mut rest = vec![44, 0, 0, 0, 0, 0, 0, 0];
    rest.extend_from_slice(&[6, 0, 0, 1, 0, 0, 0, 1]);
    rest.extend_from_slice(&ports(443, 5555));
    let x = one(LinkType::ETHERNET, &eth(0x86dd, &ip6(s, d, 0, &rest)));
    for k in [
        Key::Ip6(s),
        Key::Ip6(d),
        Key::Proto(0),
        Key::Proto(44),
        Key::Proto(6),
        Key::Port(443),
        Key::Port(5555),
        Key::EtherType(0x86dd),
    ] {
        assert!(has(&x, k), "{k:?}");
    }
    // A non-first fragment posts its protocol, not ports.
    let mut rest = vec![17, 0, 0, 0x10, 0, 0, 0, 1];
    rest.extend_from_slice(&ports(7, 8));
    let x = one(LinkType::RAW, &ip6(s, d, 44, &rest));
    assert!(has(&x, Key::Proto(17)));
    assert!(!has(&x, Key::Port(7)));
}

#[test]
fn arp_mpls_pppoe_sll_null() {
    let mut arp = vec![0, 1, 8, 0, 6, 4, 0, 1, 1, 2, 3, 4, 5, 6, 192, 168, 0, 1];
    arp.extend_from_slice(&[0, 0, 0, 0, 0, 0, 192, 168, 0, 2]);
    let x = one(LinkType::ETHERNET, &eth(0x0806, &arp));
    assert!(has(&x, Key::Ip4([192, 168, 0, 1])) && has(&x, Key::Ip4([192, 168, 0, 2])));

    let mut m = vec![0, 1, 0x20, 64, 0, 2, 0x21, 64];
    m.extend_from_slice(&ip4([9, 9, 9, 9], [8, 8, 8, 8], 17, 0, &ports(1, 2)));
    let x = one(LinkType::ETHERNET, &eth(0x8847, &m));
    assert!(has(&x, Key::Ip4([9, 9, 9, 9])) && has(&x, Key::Port(2)));
    assert!(has(&x, Key::EtherType(0x8847)) && has(&x, Key::EtherType(0x0800)));

    let mut p = vec![0x11, 0, 0, 1, 0, 40, 0, 0x21];
    p.extend_from_slice(&ip4([7, 7, 7, 7], [6, 6, 6, 6], 1, 0, &[8, 0, 0, 0]));
    let x = one(LinkType::ETHERNET, &eth(0x8864, &p));
    assert!(has(&x, Key::Ip4([7, 7, 7, 7])) && has(&x, Key::Proto(1)));

    let mut sll = vec![0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0x08, 0x00];
    sll.extend_from_slice(&ip4([5, 5, 5, 5], [4, 4, 4, 4], 6, 0, &ports(22, 23)));
    assert!(has(&one(LinkType::LINUX_SLL, &sll), Key::Port(22)));

    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(&ip4([3, 3, 3, 3], [4, 4, 4, 4], 6, 0, &ports(22, 23)));
    assert!(has(&one(LinkType::NULL, &null), Key::Ip4([3, 3, 3, 3])));

    // Unknown link types, 802.3 frames and runts are opaque.
    assert!(one(LinkType(147), &null).opaque().contains(0));
    assert!(one(LinkType::ETHERNET, &eth(40, &[0; 40]))
        .opaque()
        .contains(0));
    assert!(one(LinkType::ETHERNET, &[1, 2, 3]).opaque().contains(0));
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lr-idx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `n` packets to a pcap, indexing them as the recorder does.
fn write_capture(path: &Path, n: u32) -> FileIndex {
    let mut pw = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    let mut iw = IndexWriter::with_blocks(LinkType::ETHERNET, 4096, 1 << 20);
    let mut off = 24u64;
    for i in 0..n {
        let a = (i % 251) as u8;
        let f = eth(
            0x0800,
            &ip4(
                [10, 0, 0, a],
                [10, 1, 0, 1],
                17,
                0,
                &ports(1000, 2000 + i as u16),
            ),
        );
        pw.write_packet(u64::from(i) * 1000, &f, f.len() as u32)
            .unwrap();
        let len = 16 + f.len() as u64;
        iw.on_packet(off, len, u64::from(i) * 1000, &f);
        off += len;
    }
    pw.flush().unwrap();
    std::fs::write(path, pw.get_ref()).unwrap();
    iw.finish()
}

#[test]
fn save_load_build_agree_and_detect_damage() {
    let d = tmpdir("rt");
    let cap = d.join("a.pcap");
    let x = write_capture(&cap, 1000);
    assert!(x.blocks().len() > 10);
    assert_eq!(x.packets(), 1000);
    assert_eq!(x.time_range(), Some((0, 999_000)));
    assert_eq!(x.blocks()[0].offset, 24);
    let last = x.blocks().last().unwrap();
    assert_eq!(
        last.offset + last.len,
        std::fs::metadata(&cap).unwrap().len()
    );
    assert!(matches!(
        FileIndex::load(&cap),
        Err(IndexError::Missing { .. })
    ));
    x.save(&cap).unwrap();
    let y = FileIndex::load(&cap).unwrap();
    assert_eq!(y.blocks(), x.blocks());
    assert_eq!(
        y.lookup(&Key::Ip4([10, 0, 0, 7])),
        x.lookup(&Key::Ip4([10, 0, 0, 7]))
    );
    assert_eq!(y.ip4_keys().count(), 252);
    // build() finds the same postings (its blocks are the default size).
    let z = FileIndex::build(&cap).unwrap();
    assert_eq!(z.packets(), 1000);
    assert_eq!(z.indexed_end(), x.indexed_end());
    for (k, set) in z.ip4_keys() {
        assert_eq!(set.is_empty(), y.lookup(&Key::Ip4(k)).is_empty());
    }
    // A flipped byte is corrupt.
    let ip = index_path(&cap);
    let mut b = std::fs::read(&ip).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 1;
    std::fs::write(&ip, &b).unwrap();
    assert!(matches!(
        FileIndex::load(&cap),
        Err(IndexError::Corrupt { .. })
    ));
    // A capture shorter than indexed is stale.
    x.save(&cap).unwrap();
    let data = std::fs::read(&cap).unwrap();
    std::fs::write(&cap, &data[..data.len() - 10]).unwrap();
    assert!(matches!(
        FileIndex::load(&cap),
        Err(IndexError::Stale { .. })
    ));
    // build() tolerates the cut record.
    let z = FileIndex::build(&cap).unwrap();
    assert_eq!(z.packets(), 999);
    // A different header is stale.
    let mut data = data;
    data[20] = 113;
    std::fs::write(&cap, &data).unwrap();
    assert!(matches!(
        FileIndex::load(&cap),
        Err(IndexError::Stale { .. })
    ));
    // Truncated index files never panic.
    x.save(&cap).unwrap();
    let b = std::fs::read(&ip).unwrap();
    for cut in 0..b.len().min(400) {
        assert!(decode(&b[..cut]).is_err());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn build_never_panics_on_the_corpus() {
    let Some(dir) = linerate_test_support::corpus() else {
        return;
    };
    let rd = std::fs::read_dir(dir).unwrap();
    let mut n = 0;
    for e in rd.flatten() {
        let _ = FileIndex::build(&e.path());
        n += 1;
    }
    assert!(n >= 800, "{n} files");
}

#[test]
fn random_frames_never_panic() {
    // A small LCG: reproducible garbage of every length, on every link type.
    let mut x: u64 = 0x1234_5678;
    let mut next = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as u32
    };
    let links = [0u32, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147];
    for &l in &links {
        let mut w = IndexWriter::with_blocks(LinkType(l), 4096, 64);
        let mut off = 24;
        for i in 0..3000u32 {
            let len = (next() % 200) as usize;
            let mut f: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Often a plausible start, so parsers go deep.
            if f.len() > 14 && i % 2 == 0 {
                let t: [u16; 8] = [
                    0x0800, 0x86dd, 0x8100, 0x88a8, 0x8847, 0x8864, 0x0806, 0x9100,
                ];
                let et = t[(next() % 8) as usize];
                f[12..14].copy_from_slice(&et.to_be_bytes());
                f[14] = if i % 4 == 0 { 0x45 } else { 0x60 };
            }
            w.on_packet(off, 16 + len as u64, u64::from(i), &f);
            off += 16 + len as u64;
        }
        let idx = w.finish();
        let bytes = encode(&idx);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.blocks(), idx.blocks());
        assert_eq!(back.packets(), 3000);
    }
}

/// Rewrites the checksum of encoded index bytes after a test damaged them on purpose.
fn reseal(b: &mut [u8]) {
    let n = b.len() - 8;
    let c = checksum(&b[..n]);
    b[n..].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn lookups_decode_one_list_and_match_the_iterators() {
    let d = tmpdir("one-list");
    let cap = d.join("a.pcap");
    let x = write_capture(&cap, 3000);
    let y = decode(&encode(&x)).unwrap();
    assert!(y == x);
    assert!(x.sec.0[S_IP4].count > STRIDE * 4);
    for (k, set) in y.ip4_keys() {
        assert_eq!(y.lookup(&Key::Ip4(k)), set);
        assert!(!set.is_empty());
    }
    for (p, set) in y.port_keys() {
        assert_eq!(y.lookup(&Key::Port(p)), set);
    }
    assert_eq!(y.port_keys().count(), 3001);
    assert!(y.lookup(&Key::Ip4([10, 0, 0, 251])).is_empty());
    assert!(y.lookup(&Key::Port(1999)).is_empty());
    assert!(!y.lookup(&Key::Proto(17)).is_empty());
    assert!(y.lookup(&Key::Proto(6)).is_empty());
    assert!(!y.lookup(&Key::EtherType(0x0800)).is_empty());
    assert!(y.lookup(&Key::Tagged).is_empty());
    assert_eq!(y.ip6_keys().count(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_damaged_offset_table_is_corrupt_or_a_superset_never_a_panic() {
    let d = tmpdir("offs");
    let cap = d.join("a.pcap");
    let x = write_capture(&cap, 3000);
    x.save(&cap).unwrap();
    let ip = index_path(&cap);
    let good = std::fs::read(&ip).unwrap();
    let truth = FileIndex::load(&cap).unwrap();
    let raw_start = 44 + x.blocks().len() * 36;
    let table = raw_start + x.sec.0[S_IP4].offs;
    let entry = |b: &[u8], j: usize| {
        let at = table + 4 * j;
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    };
    let set_entry = |b: &mut Vec<u8>, j: usize, v: u32| {
        let at = table + 4 * j;
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        reseal(b);
    };
    // Out of order, not starting at 0, past the stream: refused at load.
    for (j, v) in [
        (1, 0),
        (2, entry(&good, 1)),
        (0, 1),
        (3, u32::MAX),
        (x.sec.0[S_IP4].count.div_ceil(STRIDE) - 1, 1 << 30),
    ] {
        let mut b = good.clone();
        set_entry(&mut b, j, v);
        std::fs::write(&ip, &b).unwrap();
        assert!(
            matches!(FileIndex::load(&cap), Err(IndexError::Corrupt { .. })),
            "entry {j} = {v}"
        );
    }
    // Any damage that the checksum sees is corrupt.
    let mut b = good.clone();
    b[table + 5] ^= 1;
    std::fs::write(&ip, &b).unwrap();
    assert!(matches!(
        FileIndex::load(&cap),
        Err(IndexError::Corrupt { .. })
    ));
    // A forged table (checksum rewritten), in order and inside the stream but pointing at the
    // wrong nibble: never a panic, answers inside the file's blocks (the checksum, not the
    // table, guards against damage; forged lists were as trusted in the previous format).
    for shift in 1..12u32 {
        let mut b = good.clone();
        let v = entry(&good, 1) + shift;
        if v >= entry(&good, 2) {
            break;
        }
        set_entry(&mut b, 1, v);
        std::fs::write(&ip, &b).unwrap();
        let y = FileIndex::load(&cap).unwrap();
        for (k, _) in truth.ip4_keys() {
            let got = y.lookup(&Key::Ip4(k));
            assert_eq!(got.len(), truth.blocks().len());
            assert!(got.iter().all(|b| b < truth.blocks().len()));
        }
        assert_eq!(y.ip4_keys().count(), truth.ip4_keys().count());
    }
    // A damaged stream: the iterators give supersets too.
    let mut b = good.clone();
    let s = x.sec.0[S_IP4].stream;
    b[raw_start + s.0..raw_start + s.1].fill(0xff);
    reseal(&mut b);
    let y = decode(&b).unwrap();
    for ((k, got), (k2, set)) in y.ip4_keys().zip(truth.ip4_keys()) {
        assert_eq!(k, k2);
        assert_eq!(got.clone().and(&set), set);
        assert_eq!(y.lookup(&Key::Ip4(k)).and(&set), set);
    }
    // Keys out of order are refused.
    let mut b = good.clone();
    let k = raw_start + x.sec.0[S_IP4].keys;
    b.swap(k + 3, k + 7);
    reseal(&mut b);
    assert!(decode(&b).is_err());
    // An index of the previous format is refused with its version (query reads such a file
    // whole, --reindex rebuilds it).
    let mut b = good.clone();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    reseal(&mut b);
    assert!(decode(&b).unwrap_err().contains("version 2"));
    let _ = std::fs::remove_dir_all(&d);
}

// ---- the writer before per-block key buffers, kept to check that the bytes did not change ----

#[inline]
fn post(list: &mut Posts, b: u32) {
    if list.last() != Some(&b) {
        list.push(b);
    }
}

/// The indexer as it was: a HashMap per key family, a posting pushed per packet and key (the
/// same frame parser). [`IndexWriter`] must write the same index bytes.
#[derive(Clone)]
struct OldWriter {
    link: LinkType,
    block_bytes: u64,
    block_packets: u32,
    blocks: Vec<BlockInfo>,
    cur: Open,
    data_start: u64,
    b: u32,
    ip4: HashMap<[u8; 4], Posts>,
    ip6: HashMap<[u8; 16], Posts>,
    port: Box<[Posts]>,
    proto: Box<[Posts]>,
    vlan: HashMap<u16, Posts>,
    ethertype: HashMap<u16, Posts>,
    tagged: Posts,
    opaque: Posts,
}

impl Keys for OldWriter {
    fn ip4(&mut self, a: [u8; 4]) {
        post(self.ip4.entry(a).or_default(), self.b);
    }
    fn ip6(&mut self, a: [u8; 16]) {
        post(self.ip6.entry(a).or_default(), self.b);
    }
    fn port(&mut self, p: u16) {
        post(&mut self.port[usize::from(p)], self.b);
    }
    fn proto(&mut self, p: u8) {
        post(&mut self.proto[usize::from(p)], self.b);
    }
    fn vlan(&mut self, v: u16) {
        post(self.vlan.entry(v).or_default(), self.b);
    }
    fn tagged(&mut self) {
        post(&mut self.tagged, self.b);
    }
    fn et(&mut self, t: u16) {
        post(self.ethertype.entry(t).or_default(), self.b);
    }
}

impl OldWriter {
    fn with_blocks(link: LinkType, bytes: u64, packets: u32) -> OldWriter {
        OldWriter {
            link,
            block_bytes: bytes.max(1),
            block_packets: packets.max(1),
            blocks: Vec::new(),
            cur: Open::default(),
            data_start: 0,
            b: 0,
            ip4: HashMap::new(),
            ip6: HashMap::new(),
            port: vec![Vec::new(); 65_536].into_boxed_slice(),
            proto: vec![Vec::new(); 256].into_boxed_slice(),
            vlan: HashMap::new(),
            ethertype: HashMap::new(),
            tagged: Vec::new(),
            opaque: Vec::new(),
        }
    }

    fn on_packet_link(&mut self, off: u64, len: u64, ts_ns: u64, frame: &[u8], link: LinkType) {
        let end = off.saturating_add(len);
        if self.cur.packets > 0
            && (end.saturating_sub(self.cur.offset) > self.block_bytes
                || self.cur.packets >= self.block_packets)
        {
            self.close_block();
        }
        if self.cur.packets == 0 {
            if self.blocks.is_empty() {
                self.data_start = off;
            }
            self.cur = Open {
                offset: off,
                end,
                first_ns: ts_ns,
                last_ns: ts_ns,
                packets: 0,
            };
        }
        self.cur.packets += 1;
        self.cur.end = self.cur.end.max(end);
        self.cur.first_ns = self.cur.first_ns.min(ts_ns);
        self.cur.last_ns = self.cur.last_ns.max(ts_ns);
        self.b = self.blocks.len() as u32;
        let b = self.b;
        if !(Poster { k: &mut *self }).frame(frame, link) {
            post(&mut self.opaque, b);
        }
    }

    fn close_block(&mut self) {
        let c = self.cur;
        self.blocks.push(BlockInfo {
            offset: c.offset,
            len: c.end - c.offset,
            first_ns: c.first_ns,
            last_ns: c.last_ns,
            packets: c.packets,
        });
        self.cur = Open::default();
    }

    fn finish(mut self) -> FileIndex {
        if self.cur.packets > 0 {
            self.close_block();
        }
        let end = self
            .blocks
            .last()
            .map_or(self.data_start, |b| b.offset + b.len);
        let mut raw = Vec::new();
        let mut ip4: Vec<([u8; 4], Posts)> = self.ip4.into_iter().collect();
        ip4.sort_unstable_by_key(|e| e.0);
        let mut ip6: Vec<([u8; 16], Posts)> = self.ip6.into_iter().collect();
        ip6.sort_unstable_by_key(|e| e.0);
        fn dense(v: &[Posts]) -> Vec<(usize, &Posts)> {
            v.iter()
                .enumerate()
                .filter(|(_, l)| !l.is_empty())
                .collect()
        }
        let port: Vec<([u8; 2], &Posts)> = dense(&self.port)
            .into_iter()
            .map(|(k, l)| ((k as u16).to_be_bytes(), l))
            .collect();
        let proto: Vec<([u8; 1], &Posts)> = dense(&self.proto)
            .into_iter()
            .map(|(k, l)| ([k as u8], l))
            .collect();
        fn sorted16(m: &HashMap<u16, Posts>) -> Vec<([u8; 2], &Posts)> {
            let mut v: Vec<([u8; 2], &Posts)> =
                m.iter().map(|(k, l)| (k.to_be_bytes(), l)).collect();
            v.sort_unstable_by_key(|e| e.0);
            v
        }
        let vlan = sorted16(&self.vlan);
        let ethertype = sorted16(&self.ethertype);
        let sec = Sections([
            put_section(&mut raw, 4, ip4.iter().map(|(k, l)| (&k[..], &l[..], None))),
            put_section(
                &mut raw,
                16,
                ip6.iter().map(|(k, l)| (&k[..], &l[..], None)),
            ),
            put_section(
                &mut raw,
                2,
                port.iter().map(|(k, l)| (&k[..], &l[..], None)),
            ),
            put_section(
                &mut raw,
                1,
                proto.iter().map(|(k, l)| (&k[..], &l[..], None)),
            ),
            put_section(
                &mut raw,
                2,
                vlan.iter().map(|(k, l)| (&k[..], &l[..], None)),
            ),
            put_section(
                &mut raw,
                2,
                ethertype.iter().map(|(k, l)| (&k[..], &l[..], None)),
            ),
        ]);
        let mut n = Nibbles::default();
        n.list(&self.tagged, None);
        n.list(&self.opaque, None);
        n.put(&mut raw);
        FileIndex {
            link: self.link,
            blocks: self.blocks,
            data_start: self.data_start,
            end,
            head_hash: 0,
            raw,
            sec,
            tagged: self.tagged,
            opaque: self.opaque,
        }
    }
}

/// Indexes a capture file with both writers (small blocks, so keys span many): their bytes.
fn both_writers(path: &Path, bytes: u64, packets: u32) -> Option<(Vec<u8>, Vec<u8>, u64)> {
    let f = File::open(path).ok()?;
    let mut r = PcapReader::new(f, "t").ok()?;
    let mut new = IndexWriter::with_blocks(r.link_type(), bytes, packets);
    let mut old = OldWriter::with_blocks(r.link_type(), bytes, packets);
    let mut n = 0;
    while let Ok(Some(rec)) = r.next_packet() {
        let (off, ts, link) = (rec.offset, rec.ts, rec.link);
        let data = rec.data.to_vec();
        let end = r.offset().max(off);
        new.on_packet_link(off, end - off, ts, &data, link);
        old.on_packet_link(off, end - off, ts, &data, link);
        n += 1;
        if n % 500 == 0 {
            // A sync's snapshot (the open block taken as closed, nothing of the writer
            // changed) is the old writer's index of the packets so far.
            assert!(encode(&new.snapshot()) == encode(&old.clone().finish()));
        }
    }
    Some((encode(&new.finish()), encode(&old.finish()), n))
}

#[test]
fn the_writer_writes_the_old_writers_bytes_on_the_corpus() {
    let Some(dir) = linerate_test_support::corpus() else {
        return;
    };
    let (mut files, mut packets) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        for (bytes, pk) in [(BLOCK_BYTES, BLOCK_PACKETS), (2048, 7)] {
            if let Some((new, old, n)) = both_writers(&e.path(), bytes, pk) {
                assert!(new == old, "{}: the index differs", e.path().display());
                packets += n;
                files += 1;
            }
        }
    }
    assert!(
        files >= 800 && packets > 10_000,
        "{files} files {packets} packets"
    );
}

#[test]
fn the_writer_writes_the_old_writers_bytes_on_random_frames() {
    let mut x: u64 = 0x9e37_79b9;
    let mut next = || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as u32
    };
    let links = [0u32, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147];
    for &l in &links {
        let (mut new, mut old) = (
            IndexWriter::with_blocks(LinkType(l), 4096, 64),
            OldWriter::with_blocks(LinkType(l), 4096, 64),
        );
        let mut off = 24;
        for i in 0..5000u32 {
            let len = (next() % 200) as usize;
            let mut f: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if f.len() > 40 && i % 2 == 0 {
                let t: [u16; 8] = [
                    0x0800, 0x86dd, 0x8100, 0x88a8, 0x8847, 0x8864, 0x0806, 0x9100,
                ];
                let et = t[(next() % 8) as usize];
                f[12..14].copy_from_slice(&et.to_be_bytes());
                f[14] = if i % 4 == 0 { 0x45 } else { 0x60 };
                // Few distinct addresses, so that keys repeat within and across blocks.
                for b in &mut f[26..40] {
                    *b &= 3;
                }
            }
            let link = LinkType(l);
            new.on_packet_link(off, 16 + len as u64, u64::from(i), &f, link);
            old.on_packet_link(off, 16 + len as u64, u64::from(i), &f, link);
            off += 16 + len as u64;
            if i % 300 == 0 {
                assert!(encode(&new.snapshot()) == encode(&old.clone().finish()));
            }
        }
        assert!(encode(&new.finish()) == encode(&old.finish()), "link {l}");
    }
}

/// The index of another capture of the same recorder (the same file header) copied beside a
/// capture is stale: its blocks would point into the middle of the capture's records and its
/// postings miss its packets (query lost them). A forged block table (blocks outside the file,
/// overlapping, offsets that overflow) is corrupt, never a panic.
#[test]
fn a_copied_index_is_stale_and_a_forged_block_table_corrupt() {
    let d = tmpdir("copied");
    let (a, b) = (d.join("a.pcap"), d.join("b.pcap"));
    let x = write_capture(&a, 100);
    x.save(&a).unwrap();
    write_capture(&b, 300);
    // b's first packet at another time (as the recorder's next file's is).
    let mut data = std::fs::read(&b).unwrap();
    data[24] ^= 1;
    std::fs::write(&b, &data).unwrap();
    std::fs::copy(index_path(&a), index_path(&b)).unwrap();
    match FileIndex::load(&b) {
        Err(IndexError::Stale { why, .. }) => assert!(why.contains("first record"), "{why}"),
        r => panic!("{r:?}"),
    }
    FileIndex::load(&a).unwrap();
    // Block 0's offset is at byte 44 of the file, its length at 52, block 1's offset at 80.
    let good = std::fs::read(index_path(&a)).unwrap();
    assert_eq!(good[44..52], 24u64.to_le_bytes());
    for (at, v) in [
        (44, u64::MAX - 3),
        (52, u64::MAX),
        (44, 0),
        (80, 24),
        (52, 1 << 40),
    ] {
        let mut f = good.clone();
        f[at..at + 8].copy_from_slice(&v.to_le_bytes());
        reseal(&mut f);
        let e = decode(&f).unwrap_err();
        assert!(e.contains("lies outside"), "{at} {v}: {e}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
