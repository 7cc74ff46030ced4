//! gen --script writing raw bytes that change the packet's shape: the checksums recomputed
//! after modify() are those of the bytes as written, found by parsing them.
#![deny(unsafe_code)]

use std::process::Command;

/// A script that gives the IPv4 header a 24-byte length (IHL 6: 4 bytes of options, the UDP
/// header after them) and then sets the UDP source port: the IPv4 checksum covers the options
/// (tshark's check), and the recompute does not write the template's checksum offsets (the port
/// the script set stays).
#[test]
fn gen_script_raw_ihl_change_gets_checksums_of_the_bytes_written() {
    let dir = std::env::temp_dir().join(format!("lr-hostile-lua-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("ihl.lua");
    std::fs::write(
        &script,
        "function modify(pkts, n)\n  for i = 1, n do\n    local p = pkts[i]\n    \
         p:setByte(14, 0x46)\n    p.udp.sport = 2222\n  end\nend\n",
    )
    .unwrap();
    let out = dir.join("ihl.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(["gen", "--script", script.to_str().unwrap(), "-o"])
        .arg(&out)
        .args(["-c", "3", "--size", "100", "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let t = Command::new("tshark")
        .args(["-r", out.to_str().unwrap(), "-o", "ip.check_checksum:TRUE"])
        .args([
            "-T",
            "fields",
            "-e",
            "ip.hdr_len",
            "-e",
            "ip.checksum.status",
        ])
        .args(["-e", "udp.srcport"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&t.stdout).to_string();
    let _ = std::fs::remove_dir_all(&dir);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 3, "{text}");
    for r in rows {
        // Header length 24, checksum good (1), ports as written.
        let f: Vec<&str> = r.split('\t').collect();
        assert_eq!(&f[..2], &["24", "1"], "{text}");
        assert_eq!(f[2], "2222", "{text}");
    }
}
