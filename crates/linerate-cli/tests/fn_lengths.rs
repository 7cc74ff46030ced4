//! Small rooms: no function in the command-line crate over 120 lines, none in the library
//! over 200. A library hot loop that is faster in one piece may stay when it is named in
//! scripts/long-fns-allowed.txt (its measured reason goes in docs/DESIGN.md).
//!
//! `scripts/fn-lengths.sh` runs this test and prints every function over its limit.
//! A function's length counts the lines from its `fn` keyword to its closing brace.
#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

const CLI_LIMIT: usize = 120;
const LIB_LIMIT: usize = 200;

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
}

/// Words and brackets of Rust source with their line numbers; comments, strings and
/// character literals are skipped, so braces inside them do not count.
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Skip a quoted string starting at c[i] == '"'; `hashes` closing '#'s for raw strings.
    let skip_str = |i: &mut usize, line: &mut usize, raw: bool, hashes: usize| {
        *i += 1;
        while *i < c.len() {
            match c[*i] {
                '\n' => *line += 1,
                '\\' if !raw => {
                    if c.get(*i + 1) == Some(&'\n') {
                        *line += 1;
                    }
                    *i += 1;
                }
                '"' if (1..=hashes).all(|k| c.get(*i + k) == Some(&'#')) => {
                    *i += 1 + hashes;
                    return;
                }
                _ => {}
            }
            *i += 1;
        }
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            skip_str(&mut i, &mut line, false, 0);
        } else if ch == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let next = c.get(i).copied();
            if (word == "r" || word == "br") && matches!(next, Some('"') | Some('#')) {
                let mut hashes = 0;
                while c.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                if c.get(i) == Some(&'"') {
                    skip_str(&mut i, &mut line, true, hashes);
                }
            } else if word == "b" && next == Some('"') {
                skip_str(&mut i, &mut line, false, 0);
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else {
            if "{}()[];".contains(ch) {
                out.push((Tok::Punct(ch), line));
            }
            i += 1;
        }
    }
    out
}

/// Every function with a body in `src`: (name, first line, length in lines).
fn functions(src: &str) -> Vec<(String, usize, usize)> {
    let t = tokens(src);
    let mut found = Vec::new();
    for i in 0..t.len() {
        let (Tok::Ident(kw), first) = &t[i] else {
            continue;
        };
        let Some((Tok::Ident(name), _)) = t.get(i + 1) else {
            continue;
        };
        if kw != "fn" {
            continue;
        }
        // The body opens at the first '{' outside the signature's () and [].
        let mut depth = 0i32;
        let mut j = i + 2;
        let mut open = None;
        while j < t.len() {
            match t[j].0 {
                Tok::Punct('(') | Tok::Punct('[') => depth += 1,
                Tok::Punct(')') | Tok::Punct(']') => depth -= 1,
                Tok::Punct(';') if depth == 0 => break,
                Tok::Punct('{') if depth == 0 => {
                    open = Some(j);
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let Some(open) = open else { continue };
        let mut braces = 0;
        for (tok, last) in &t[open..] {
            match tok {
                Tok::Punct('{') => braces += 1,
                Tok::Punct('}') => {
                    braces -= 1;
                    if braces == 0 {
                        found.push((name.clone(), *first, last - first + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `path::name` entries of scripts/long-fns-allowed.txt ('#' starts a comment).
fn allowed() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("scripts/long-fns-allowed.txt"))
        .expect("read scripts/long-fns-allowed.txt");
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// Functions over the limit in one crate's src/: ("path::name", line, length).
fn long_functions(krate: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let mut files = Vec::new();
    rust_files(&root().join("crates").join(krate).join("src"), &mut files);
    let mut long = Vec::new();
    for f in files {
        let src = std::fs::read_to_string(&f).expect("read source");
        let rel = f
            .strip_prefix(root())
            .unwrap_or(&f)
            .to_string_lossy()
            .to_string();
        for (name, line, len) in functions(&src) {
            if len > limit {
                long.push((format!("{rel}::{name}"), line, len));
            }
        }
    }
    long
}

#[test]
fn no_function_over_its_limit() {
    let allowed = allowed();
    let mut over = Vec::new();
    let mut seen = Vec::new();
    for (krate, limit) in [("linerate-cli", CLI_LIMIT), ("linerate", LIB_LIMIT)] {
        for (name, line, len) in long_functions(krate, limit) {
            let ok = allowed.contains(&name);
            seen.push(name.clone());
            println!(
                "{len:5} lines  {name} (line {line}, limit {limit}){}",
                if ok { "  allowed" } else { "" }
            );
            if !ok {
                over.push(format!("{name}: {len} lines (limit {limit})"));
            }
        }
    }
    for name in &allowed {
        if !seen.contains(name) {
            println!("allowed but no longer over its limit (remove it from the list): {name}");
        }
    }
    assert!(
        over.is_empty(),
        "split these by what each part does (parse, open, run, report), or for a library hot \
         loop name it in scripts/long-fns-allowed.txt with its measured reason in \
         docs/DESIGN.md:\n{}",
        over.join("\n")
    );
}

/// `LINERATE_FN_LIST=N` (scripts/fn-lengths.sh N): every function of both crates over N
/// lines, longest first, whatever the limits.
#[test]
fn list_functions_over_a_length_asked() {
    let Some(n) = std::env::var("LINERATE_FN_LIST")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    else {
        return;
    };
    let mut all: Vec<(String, usize, usize)> = ["linerate-cli", "linerate"]
        .iter()
        .flat_map(|k| long_functions(k, n))
        .collect();
    all.sort_by_key(|f| std::cmp::Reverse(f.2));
    for (name, line, len) in all {
        println!("{len:5} lines  {name} (line {line})");
    }
}

#[test]
fn the_measure_counts_from_fn_to_closing_brace() {
    let src = "fn a() {\n    let s = \"}\";\n    let c = '}';\n    // }\n}\n\
               fn b<'x>(v: [u8; 4]) -> &'x str {\n    r#\"{\"#\n}\n\
               trait T { fn c(&self); }\n";
    let f = functions(src);
    assert_eq!(
        f,
        vec![("a".to_string(), 1, 5), ("b".to_string(), 6, 3)],
        "{f:?}"
    );
}
