//! The console's keys and command line: a key either runs a command at once (`q` quit, `s`
//! start, `p` stop) or opens the command line, prefilled for the command it stands for (`r`
//! `rate `, `z` `size `, `m` `dst-mac `, `c` `count `, `:` empty); Enter runs the line. What
//! comes out is a command line as `--commands -` reads it, run by the same parser
//! ([`super::commands::Steer::exec`]).

use super::page::Prompt;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The keys of a steerable tool (gen).
pub const STEER_KEYS: &str = "keys: s start  p stop  r rate  z size  m dst-mac  c count  \
                              : command  q quit";
/// The keys of a read-only page.
pub const READ_ONLY_KEYS: &str = "keys: q quit (or Ctrl-C)";

/// The command line's state.
#[derive(Debug, Default)]
pub struct CommandLine {
    /// Whether the tool takes commands other than `quit`.
    steer: bool,
    /// Being typed.
    editing: Option<String>,
    /// The outcome of the last command.
    message: Option<String>,
}

/// What a key did.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to show.
    None,
    /// The command line changed: draw it again.
    Redraw,
    /// Run this command (as a `--commands -` line).
    Run(String),
}

impl CommandLine {
    /// A command line for a tool that takes commands (`steer`) or only `quit`.
    pub fn new(steer: bool) -> CommandLine {
        CommandLine {
            steer,
            ..Default::default()
        }
    }

    /// Takes one key.
    pub fn key(&mut self, k: KeyEvent) -> Action {
        if k.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        // Ctrl-C (a signal when not in raw mode) and Ctrl-D always quit.
        if ctrl && matches!(k.code, KeyCode::Char('c') | KeyCode::Char('d')) {
            self.editing = None;
            return Action::Run("quit".into());
        }
        if let Some(t) = &mut self.editing {
            match k.code {
                KeyCode::Enter => {
                    let line = t.trim().to_string();
                    self.editing = None;
                    return if line.is_empty() {
                        Action::Redraw
                    } else {
                        Action::Run(line)
                    };
                }
                KeyCode::Esc => self.editing = None,
                KeyCode::Backspace => {
                    t.pop();
                }
                KeyCode::Char(c) if !ctrl && t.len() < 200 => t.push(c),
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        let open = |s: &str| Some(s.to_string());
        let (run, edit) = match k.code {
            KeyCode::Char('q') | KeyCode::Esc => (Some("quit"), None),
            KeyCode::Char(':') => (None, open("")),
            KeyCode::Char('s') if self.steer => (Some("start"), None),
            KeyCode::Char('p') if self.steer => (Some("stop"), None),
            KeyCode::Char('r') if self.steer => (None, open("rate ")),
            KeyCode::Char('z') if self.steer => (None, open("size ")),
            KeyCode::Char('m') if self.steer => (None, open("dst-mac ")),
            KeyCode::Char('c') if self.steer => (None, open("count ")),
            _ => (None, None),
        };
        match (run, edit) {
            (Some(c), _) => Action::Run(c.into()),
            (None, Some(e)) => {
                self.editing = Some(e);
                Action::Redraw
            }
            (None, None) => Action::None,
        }
    }

    /// Records the outcome of command `cmd`.
    pub fn outcome(&mut self, cmd: &str, r: &Result<(), String>) {
        self.message = Some(match r {
            Ok(()) => format!("ok: {cmd}"),
            Err(e) => format!("refused: {cmd}: {e}"),
        });
    }

    /// Shows `m` on the command line until the next command's outcome.
    pub fn set_message(&mut self, m: String) {
        self.message = Some(m);
    }

    /// What the page shows under the figures.
    pub fn prompt(&self) -> Prompt {
        Prompt {
            editing: self.editing.clone(),
            message: self.message.clone(),
            keys: if self.steer {
                STEER_KEYS
            } else {
                READ_ONLY_KEYS
            }
            .into(),
        }
    }
}

/// Runs `cmd` on a read-only page: only `quit` (or `q`) is taken; Ok(true) means quit.
pub fn read_only(cmd: &str) -> Result<bool, String> {
    match cmd.trim() {
        "quit" | "q" => Ok(true),
        c => Err(format!(
            "'{c}': this page is read-only (only quit); gen takes commands"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::commands::Steer;
    use linerate::apps::gen::StreamSpec;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn press(l: &mut CommandLine, keys: &str) -> Vec<String> {
        let mut out = Vec::new();
        for c in keys.chars() {
            let code = match c {
                '\n' => KeyCode::Enter,
                '\x1b' => KeyCode::Esc,
                '\x08' => KeyCode::Backspace,
                c => KeyCode::Char(c),
            };
            if let Action::Run(cmd) = l.key(KeyEvent::new(code, KeyModifiers::NONE)) {
                out.push(cmd);
            }
        }
        out
    }

    fn steer() -> Steer {
        let base = vec![StreamSpec {
            pps: Some(1000.0),
            ..Default::default()
        }];
        Steer::new(base, 1, 10e9, Arc::new(AtomicBool::new(false)))
    }

    #[test]
    fn keys_give_the_commands_of_commands_stdin() {
        let mut l = CommandLine::new(true);
        let typed = press(
            &mut l,
            "pr2Mpps\nz128\nm02:00:00:00:00:07\nc10k\n:rate 50%\n:size 256\x08\x08\x0864\ns\
             :bogus\x1b\nq",
        );
        let lines = [
            "stop",
            "rate 2Mpps",
            "size 128",
            "dst-mac 02:00:00:00:00:07",
            "count 10k",
            "rate 50%",
            "size 64",
            "start",
            "quit",
        ];
        assert_eq!(typed, lines);
        // The keys and the same lines given to --commands - leave the same settings.
        let (mut by_keys, mut by_lines) = (steer(), steer());
        for (k, l) in typed.iter().zip(lines) {
            by_keys.exec(k).unwrap();
            by_lines.exec(l).unwrap();
        }
        assert_eq!(by_keys.ctl.get(), by_lines.ctl.get());
        assert_eq!(by_keys.asked_pps(), by_lines.asked_pps());
        // Ctrl-C quits even while typing.
        press(&mut l, "r1");
        let k = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(l.key(k), Action::Run("quit".into()));
        assert_eq!(l.prompt().editing, None);
    }

    #[test]
    fn a_read_only_page_takes_only_quit() {
        let mut l = CommandLine::new(false);
        // gen's keys do nothing there; `:` still opens the line.
        assert!(press(&mut l, "sprzmc").is_empty());
        assert_eq!(press(&mut l, ":rate 1Mpps\n"), ["rate 1Mpps"]);
        assert!(read_only("rate 1Mpps").is_err());
        assert_eq!(read_only("quit"), Ok(true));
        assert_eq!(press(&mut l, "q"), ["quit"]);
        let stop = Arc::new(AtomicBool::new(false));
        let mut s = Steer::new(vec![StreamSpec::default()], 1, 1e9, stop.clone());
        s.exec(&press(&mut l, "q")[0]).unwrap();
        assert!(stop.load(Ordering::SeqCst));
    }
}
