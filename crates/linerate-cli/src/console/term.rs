//! The terminal under the live page: raw mode and the alternate screen while it shows, and the
//! terminal given back as it was whatever ends the run: `quit`, Ctrl-C (a key in raw mode,
//! taken as `quit`), a stop signal (the tools' stop flag ends their loop, and the console is
//! dropped), an error (dropped on the way out) or a panic (a panic hook restores it before the
//! message is printed).

use super::keys::{Action, CommandLine};
use super::page::{self, Page};
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::Terminal;
use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::time::Duration;

/// Whether the terminal is in the console's state (raw, alternate screen).
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Whether a tool shows the live page: standard output and input are terminals, and none of
/// `--json`, `--quiet`, `--no-console` (nor gen's `--commands -`) asked for lines.
pub fn wanted(lines_asked: bool) -> bool {
    !lines_asked && std::io::stdout().is_terminal() && std::io::stdin().is_terminal()
}

/// Gives the terminal back (cooked mode, main screen, cursor shown); does nothing when the
/// console is not showing. Safe to call more than once.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(std::io::stdout(), LeaveAlternateScreen, Show);
    }
}

/// Whether a key (or another terminal event) waits to be read, waiting up to `timeout` for
/// one; false once the console is not showing.
pub fn key_waiting(timeout: Duration) -> bool {
    if !ACTIVE.load(Ordering::SeqCst) {
        std::thread::sleep(timeout);
        return false;
    }
    event::poll(timeout).unwrap_or(false)
}

/// The live page on this terminal.
pub struct Console {
    term: Option<Terminal<CrosstermBackend<Stdout>>>,
    line: CommandLine,
    page: Page,
}

impl Console {
    /// Takes over the terminal; `steer`: the tool takes commands (gen), else only `quit`.
    pub fn start(steer: bool) -> anyhow::Result<Console> {
        HOOK.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                prev(info);
            }));
        });
        enable_raw_mode().map_err(|e| anyhow::anyhow!("the console: raw mode: {e}"))?;
        ACTIVE.store(true, Ordering::SeqCst);
        // From here on, an early return drops `c`, which restores the terminal.
        let mut c = Console {
            term: None,
            line: CommandLine::new(steer),
            page: Page::default(),
        };
        execute!(std::io::stdout(), EnterAlternateScreen, Hide)
            .map_err(|e| anyhow::anyhow!("the console: alternate screen: {e}"))?;
        c.term = Some(
            Terminal::new(CrosstermBackend::new(std::io::stdout()))
                .map_err(|e| anyhow::anyhow!("the console: {e}"))?,
        );
        Ok(c)
    }

    /// Shows `page` (once per interval).
    pub fn show(&mut self, page: Page) {
        self.page = page;
        self.draw();
    }

    fn draw(&mut self) {
        let prompt = self.line.prompt();
        if let Some(t) = &mut self.term {
            if t.draw(|f| page::render(f, &self.page, &prompt)).is_err() {
                // The terminal went away: give it back and let the tool run on (a hangup
                // stops it through its stop flag).
                self.term = None;
                restore();
            }
        }
    }

    /// The commands typed since the last call (waits for none), as `--commands -` lines.
    pub fn commands(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut redraw = false;
        while self.term.is_some() && event::poll(Duration::ZERO).unwrap_or(false) {
            match event::read() {
                Ok(Event::Key(k)) => match self.line.key(k) {
                    Action::None => {}
                    Action::Redraw => redraw = true,
                    Action::Run(c) => {
                        out.push(c);
                        redraw = true;
                    }
                },
                Ok(Event::Resize(..)) => redraw = true,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if redraw {
            self.draw();
        }
        out
    }

    /// Records a command's outcome on the command line.
    pub fn outcome(&mut self, cmd: &str, r: &Result<(), String>) {
        self.line.outcome(cmd, r);
        self.draw();
    }

    /// Says `m` on the command line (until the next command's outcome).
    pub fn say(&mut self, m: String) {
        self.line.set_message(m);
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.term = None;
        restore();
    }
}
