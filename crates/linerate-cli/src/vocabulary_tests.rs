//! The flag vocabulary kept true: every long flag of every tool is in a doc, and a short flag
//! means one thing in every tool (the table in docs/DESIGN.md, "One flag vocabulary").

use super::Cli;
use clap::CommandFactory;

/// Tools whose flags another part of the project documents (the demo's own page).
const DOCUMENTED_ELSEWHERE: [&str; 0] = [];

/// The README and every page of docs/, as one text.
fn docs() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut text = std::fs::read_to_string(root.join("README.md")).unwrap();
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            text.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
    text
}

/// Whether `flag` (`--in`) appears in `text` as a whole flag (not as the start of `--interval`).
fn mentions(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(i, _)| {
        !text[i + flag.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn every_long_flag_of_every_tool_is_in_a_doc() {
    let docs = docs();
    let mut missing = Vec::new();
    for sub in Cli::command().get_subcommands() {
        if DOCUMENTED_ELSEWHERE.contains(&sub.get_name()) {
            continue;
        }
        for arg in sub.get_arguments() {
            if arg.is_hide_set() {
                continue;
            }
            let Some(long) = arg.get_long() else { continue };
            if long == "help" || long == "version" {
                continue;
            }
            if !mentions(&docs, &format!("--{long}")) {
                missing.push(format!("{} --{long}", sub.get_name()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags in no doc (README.md or docs/*.md): {missing:?}"
    );
}

#[test]
fn a_short_flag_means_one_thing_in_every_tool() {
    // The anchor letters kept where the majority meaning cannot be told apart (DESIGN.md's
    // table): balance's -c is zbalance_ipc's cluster id; -g is a core everywhere, balance's
    // long form names its list of cores.
    let kept = [("balance", 'c', "cluster"), ("balance", 'g', "cores")];
    let mut meaning: std::collections::BTreeMap<char, (String, String)> = Default::default();
    let mut clashes = Vec::new();
    for sub in Cli::command().get_subcommands() {
        if DOCUMENTED_ELSEWHERE.contains(&sub.get_name()) {
            continue;
        }
        for arg in sub.get_arguments() {
            // A retired letter (hidden, no long form) is refused, not a meaning.
            let (Some(short), Some(long)) = (arg.get_short(), arg.get_long()) else {
                continue;
            };
            if kept.contains(&(sub.get_name(), short, long)) {
                continue;
            }
            match meaning.get(&short) {
                Some((l, first)) if l != long => clashes.push(format!(
                    "-{short}: --{l} in {first}, --{long} in {}",
                    sub.get_name()
                )),
                Some(_) => {}
                None => {
                    meaning.insert(short, (long.to_string(), sub.get_name().to_string()));
                }
            }
        }
    }
    assert!(clashes.is_empty(), "{clashes:?}");
    // The table's letters, as the tools define them.
    for (short, long) in [
        ('i', "in"),
        ('o', "out"),
        ('c', "count"),
        ('t', "duration"),
        ('T', "threads"),
        ('q', "quiet"),
        ('f', "filter"),
        ('w', "write"),
        ('g', "core"),
        ('b', "ring-buffer"),
    ] {
        assert_eq!(meaning[&short].0, long, "-{short}");
    }
}

#[test]
fn every_tool_that_prints_a_summary_has_quiet() {
    for sub in Cli::command().get_subcommands() {
        if ["exec", "extcap", "completions", "man"].contains(&sub.get_name()) {
            continue;
        }
        assert!(
            sub.get_arguments().any(|a| a.get_short() == Some('q')),
            "{} has no -q",
            sub.get_name()
        );
    }
}

#[test]
fn threads_takes_a_number_in_every_tool() {
    for sub in Cli::command().get_subcommands() {
        if let Some(a) = sub
            .get_arguments()
            .find(|a| a.get_long() == Some("threads"))
        {
            assert!(
                a.get_action().takes_values(),
                "{} --threads is a switch",
                sub.get_name()
            );
        }
    }
}
