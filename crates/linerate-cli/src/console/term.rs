//! The terminal under the live page: raw mode and the alternate screen while it shows, and the
//! terminal given back as it was whatever ends the run: `quit`, Ctrl-C (a key in raw mode,
//! taken as `quit`), a stop signal (the tools' stop flag ends their loop, and the console is
//! dropped), an error (dropped on the way out) or a panic (a panic hook restores it before the
//! message is printed).

use super::keys::{Action, CommandLine};
use super::page::{self, Page};
use linerate::os::InputState;
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
    // Asked of the terminal first: crossterm's poll sees a hung-up terminal as ready forever
    // and spins inside, whatever its timeout.
    match tty_input(timeout) {
        InputState::Ready => true,
        InputState::Idle => false,
        InputState::Gone => {
            // Give the terminal back (the hangup stops the tool through its stop flag); from
            // now on this only waits.
            restore();
            std::thread::sleep(timeout);
            false
        }
    }
}

/// The terminal crossterm reads keys from (standard input when it is one, else /dev/tty),
/// found once while it is alive: a hung-up terminal no longer says it is one.
fn tty_fd() -> Option<&'static std::os::fd::OwnedFd> {
    static TTY: std::sync::OnceLock<Option<std::os::fd::OwnedFd>> = std::sync::OnceLock::new();
    TTY.get_or_init(|| {
        use std::os::fd::AsFd;
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            stdin.as_fd().try_clone_to_owned().ok()
        } else {
            std::fs::File::open("/dev/tty")
                .ok()
                .map(std::os::fd::OwnedFd::from)
        }
    })
    .as_ref()
}

/// Whether the terminal's input has something, nothing, or is gone.
fn tty_input(timeout: Duration) -> InputState {
    use std::os::fd::AsFd;
    match tty_fd() {
        Some(fd) => linerate::os::wait_input(fd.as_fd(), timeout).unwrap_or(InputState::Gone),
        // No terminal to ask: crossterm alone (it cannot tell a hangup).
        None => match event::poll(timeout) {
            Ok(true) => InputState::Ready,
            Ok(false) => InputState::Idle,
            Err(_) => InputState::Gone,
        },
    }
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
        // Found while the terminal is alive (see tty_fd).
        let _ = tty_fd();
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

    /// The terminal went away: give it back and let the tool run on (a hangup stops it
    /// through its stop flag).
    fn gone(&mut self) {
        self.term = None;
        restore();
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
        // At most a screenful of events a call: a terminal that closed may read as events
        // forever, and the caller holds the page meanwhile.
        let mut budget = 64;
        while self.term.is_some() && budget > 0 {
            budget -= 1;
            // Gone is asked of the terminal itself (see key_waiting); what crossterm already
            // read and holds is then taken from its queue.
            if tty_input(Duration::ZERO) == InputState::Gone {
                self.gone();
                break;
            }
            if !event::poll(Duration::ZERO).unwrap_or(false) {
                break;
            }
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
                Err(_) => {
                    // A closed terminal reads as an error (EIO) at once, every time: give it
                    // back so that the keys' thread waits instead of spinning (and holding the
                    // page from the tool's thread); the hangup stops the tool.
                    self.gone();
                    break;
                }
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
