//! Each committed BPF object `bpf/NAME.o` is what `bpf/build.sh NAME` builds from
//! `bpf/NAME.c`: clang's BPF output is byte-reproducible for a given clang and flags
//! (build.sh compiles from bpf/ with a relative path, without debug info), so the check is a
//! byte comparison with a fresh build. Without clang the test says SKIP; with
//! `LINERATE_REQUIRE_CLANG=1` that is a failure.
#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;

#[test]
fn committed_object_matches_a_fresh_build_of_the_source() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bpf = root.join("bpf");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    if Command::new(&clang).arg("--version").output().is_err() {
        linerate_test_support::skip(&format!(
            "{clang} not found; cannot rebuild the BPF objects (bash scripts/setup.sh --tests installs clang)"
        ));
        return;
    }
    let mut names: Vec<String> = std::fs::read_dir(&bpf)
        .unwrap()
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".c").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.iter().any(|n| n == "xdp_redirect"), "{names:?}");
    for name in &names {
        let out = std::env::temp_dir().join(format!("lr-{name}-{}.o", std::process::id()));
        let st = Command::new(bpf.join("build.sh"))
            .arg(name)
            .arg(&out)
            .env("CLANG", &clang)
            .status()
            .expect("run bpf/build.sh");
        assert!(st.success(), "bpf/build.sh {name} failed");
        let fresh = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        let committed = std::fs::read(bpf.join(format!("{name}.o")))
            .unwrap_or_else(|e| panic!("bpf/{name}.o: {e}: run bpf/build.sh and commit"));
        assert!(
            fresh == committed,
            "bpf/{name}.o is out of date with bpf/{name}.c: run bpf/build.sh and commit"
        );
    }
    let committed = std::fs::read(bpf.join("xdp_redirect.o")).unwrap();
    // And the library embeds that same object.
    assert_eq!(linerate::port::xdp::prog::OBJECT, committed.as_slice());
}
