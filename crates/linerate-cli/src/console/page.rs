//! The live page's figures ([`Page`]) and its one set of widgets ([`render`]), shared by gen
//! (steerable) and fwd, count and balance (read-only). The tools fill a [`Page`] from the
//! counters their interval lines read; nothing here touches a port.

use linerate::port::{DropReason, Drops};
use linerate::stats::{group, group_f};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;

/// One port in one direction.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortRow {
    /// The port as given on the command line.
    pub port: String,
    /// "tx" or "rx".
    pub dir: &'static str,
    /// Packets per second in the last interval.
    pub pps: f64,
    /// Megabits per second in the last interval.
    pub mbps: f64,
    /// Packets so far.
    pub packets: u64,
    /// Packets dropped or refused so far (all reasons).
    pub drops: u64,
}

/// The rate asked and achieved (gen).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateLine {
    /// Asked, packets per second in all (None: as fast as possible).
    pub asked: Option<f64>,
    /// Achieved in the last interval.
    pub achieved: f64,
}

/// Latency of the probes that came back.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencyLine {
    /// Probes received so far.
    pub probes: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
}

/// Everything the page shows, once per interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Page {
    /// What runs (e.g. `linerate gen -o xdp:veth0`).
    pub title: String,
    /// Seconds since the start.
    pub elapsed_s: f64,
    /// What the tool is doing (e.g. `sending, 64 B frames` or `stopped`).
    pub state: String,
    /// The rate asked and achieved (gen only).
    pub rate: Option<RateLine>,
    /// A word on the last interval when it did not go as asked.
    pub status: Option<String>,
    /// One row per port and direction.
    pub ports: Vec<PortRow>,
    /// One row per thread and direction (threaded count and fwd): the thread's number and
    /// its share, `port` naming the queues it owns. They add up to the ports' rows.
    pub threads: Vec<(usize, PortRow)>,
    /// Drops so far, by reason (reasons with none left out).
    pub drops: Vec<(String, u64)>,
    /// Latency of the probes received (gen with --rx, count --latency).
    pub latency: Option<LatencyLine>,
}

impl Page {
    /// Adds `d`'s reasons to the drops by reason, each under `prefix` (e.g. `tx `).
    pub fn add_drops(&mut self, prefix: &str, d: &Drops) {
        for r in DropReason::ALL {
            let n = d.get(r);
            if n == 0 {
                continue;
            }
            let name = format!("{prefix}{}", r.name());
            match self.drops.iter_mut().find(|(k, _)| *k == name) {
                Some((_, v)) => *v += n,
                None => self.drops.push((name, n)),
            }
        }
    }
}

/// The command line under the page: what is being typed, the last command's outcome and the
/// keys the tool takes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prompt {
    /// Being typed (None: not editing).
    pub editing: Option<String>,
    /// The outcome of the last command.
    pub message: Option<String>,
    /// The keys, one line.
    pub keys: String,
}

/// The rate line: both figures when they differ as printed, one when they agree.
pub fn rate_text(r: &RateLine) -> String {
    let got = group_f(r.achieved, 0);
    match r.asked {
        None => format!("{got} pps (as fast as possible)"),
        Some(a) if a <= 0.0 => format!("stopped (achieved {got} pps)"),
        Some(a) if group_f(a, 0) == got => format!("{got} pps, as asked"),
        Some(a) => format!(
            "asked {} pps, achieved {got} pps ({}%)",
            group_f(a, 0),
            group_f(100.0 * r.achieved / a, 1)
        ),
    }
}

/// A latency in ns: µs with two decimals below a millisecond, else ms.
fn us(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} µs", group_f(ns as f64 / 1e3, 2))
    } else {
        format!("{} ms", group_f(ns as f64 / 1e6, 2))
    }
}

/// Draws `page` and `prompt` over the whole frame.
pub fn render(f: &mut Frame, page: &Page, prompt: &Prompt) {
    let area = f.area();
    let head_h = 3 + u16::from(page.rate.is_some()) + u16::from(page.latency.is_some());
    let drops_h = if page.drops.is_empty() {
        3
    } else {
        2 + page.drops.len() as u16 + 1
    };
    if page.threads.is_empty() {
        let [head, ports, drops, cmd] = Layout::vertical([
            Constraint::Length(head_h),
            Constraint::Min(4),
            Constraint::Length(drops_h),
            Constraint::Length(4),
        ])
        .areas(area);
        head_widget(f, head, page);
        ports_widget(f, ports, page);
        drops_widget(f, drops, page);
        prompt_widget(f, cmd, prompt);
        return;
    }
    let [head, ports, threads, drops, cmd] = Layout::vertical([
        Constraint::Length(head_h),
        Constraint::Length(3 + page.ports.len() as u16),
        Constraint::Min(4),
        Constraint::Length(drops_h),
        Constraint::Length(4),
    ])
    .areas(area);
    head_widget(f, head, page);
    ports_widget(f, ports, page);
    threads_widget(f, threads, page);
    drops_widget(f, drops, page);
    prompt_widget(f, cmd, prompt);
}

fn head_widget(f: &mut Frame, area: Rect, page: &Page) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::from(vec![
        Span::styled("State: ", bold),
        Span::raw(page.state.clone()),
        Span::raw(format!("   elapsed {} s", group_f(page.elapsed_s, 1))),
    ])];
    if let Some(r) = &page.rate {
        let mut v = vec![Span::styled("Rate: ", bold), Span::raw(rate_text(r))];
        if let Some(s) = &page.status {
            v.push(Span::raw(format!(" ({s})")));
        }
        lines.push(Line::from(v));
    }
    if let Some(l) = &page.latency {
        lines.push(Line::from(vec![
            Span::styled("Latency: ", bold),
            Span::raw(format!(
                "p50 {}, p99 {} over {} probes",
                us(l.p50_ns),
                us(l.p99_ns),
                group(l.probes)
            )),
        ]));
    }
    let b = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {} ", page.title));
    f.render_widget(Paragraph::new(lines).block(b), area);
}

/// One table row of figures: `first` cells, then pps, Mbit/s, packets and drops.
fn figures_row<'a>(first: Vec<Cell<'a>>, p: &PortRow) -> Row<'a> {
    let mut cells = first;
    cells.extend([
        Cell::from(p.dir),
        Cell::from(Line::from(group_f(p.pps, 0)).right_aligned()),
        Cell::from(Line::from(group_f(p.mbps, 2)).right_aligned()),
        Cell::from(Line::from(group(p.packets)).right_aligned()),
        Cell::from(Line::from(group(p.drops)).right_aligned()),
    ]);
    Row::new(cells)
}

/// The widths of the figures' columns (after the first ones).
const FIGURES: [Constraint; 5] = [
    Constraint::Length(3),
    Constraint::Length(14),
    Constraint::Length(12),
    Constraint::Length(18),
    Constraint::Length(13),
];

fn ports_widget(f: &mut Frame, area: Rect, page: &Page) {
    let head = Row::new(["Port", "Dir", "pps", "Mbit/s", "Packets", "Errors/drops"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    let rows = page
        .ports
        .iter()
        .map(|p| figures_row(vec![Cell::from(p.port.clone())], p));
    let mut widths = vec![Constraint::Min(12)];
    widths.extend(FIGURES);
    let t = Table::new(rows, widths)
        .header(head)
        .block(Block::default().borders(Borders::ALL).title(" Ports "));
    f.render_widget(t, area);
}

fn threads_widget(f: &mut Frame, area: Rect, page: &Page) {
    let head = Row::new([
        "Thread",
        "Queues",
        "Dir",
        "pps",
        "Mbit/s",
        "Packets",
        "Errors/drops",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let rows = page.threads.iter().map(|(t, p)| {
        figures_row(
            vec![
                Cell::from(Line::from(t.to_string()).right_aligned()),
                Cell::from(p.port.clone()),
            ],
            p,
        )
    });
    let mut widths = vec![Constraint::Length(6), Constraint::Min(10)];
    widths.extend(FIGURES);
    let t = Table::new(rows, widths)
        .header(head)
        .block(Block::default().borders(Borders::ALL).title(" Threads "));
    f.render_widget(t, area);
}

fn drops_widget(f: &mut Frame, area: Rect, page: &Page) {
    let b = Block::default()
        .borders(Borders::ALL)
        .title(" Drops by reason ");
    if page.drops.is_empty() {
        f.render_widget(Paragraph::new("none").block(b), area);
        return;
    }
    let rows = page.drops.iter().map(|(k, v)| {
        Row::new([
            Cell::from(k.clone()),
            Cell::from(Line::from(group(*v)).right_aligned()),
        ])
    });
    let t = Table::new(rows, [Constraint::Length(24), Constraint::Length(18)])
        .header(
            Row::new(["Reason", "Packets"]).style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(b);
    f.render_widget(t, area);
}

fn prompt_widget(f: &mut Frame, area: Rect, p: &Prompt) {
    let first = match &p.editing {
        Some(t) => Line::from(format!("> {t}_")),
        None => Line::from(p.message.clone().unwrap_or_default()),
    };
    let lines = vec![first, Line::from(p.keys.clone())];
    let b = Block::default().borders(Borders::ALL).title(" Command ");
    f.render_widget(Paragraph::new(lines).block(b), area);
}

/// `page` and `prompt` drawn on a `width` × `height` screen of text (tests, docs).
#[cfg(test)]
pub fn render_text(page: &Page, prompt: &Prompt, width: u16, height: u16) -> String {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height))
        .expect("a test backend always opens");
    t.draw(|f| render(f, page, prompt))
        .expect("a test backend always draws");
    let b = t.backend().buffer();
    let mut s = String::new();
    for y in 0..height {
        let mut line = String::new();
        for x in 0..width {
            line.push_str(b[(x, y)].symbol());
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::keys::CommandLine;

    fn gen_page() -> Page {
        let mut p = Page {
            title: "linerate gen -o afpacket:veth0 --rx afpacket:veth1".into(),
            elapsed_s: 12.0,
            state: "sending, size 64".into(),
            rate: Some(RateLine {
                asked: Some(1_000_000.0),
                achieved: 998_000.0,
            }),
            status: Some("port-limited, 2.5 ms behind".into()),
            latency: Some(LatencyLine {
                probes: 11_976_000,
                p50_ns: 41_250,
                p99_ns: 180_500,
            }),
            ports: vec![
                PortRow {
                    port: "afpacket:veth0".into(),
                    dir: "tx",
                    pps: 998_000.0,
                    mbps: 543.11,
                    packets: 11_976_000,
                    drops: 0,
                },
                PortRow {
                    port: "afpacket:veth1".into(),
                    dir: "rx",
                    pps: 990_001.0,
                    mbps: 538.76,
                    packets: 11_880_012,
                    drops: 95_988,
                },
            ],
            ..Default::default()
        };
        let mut d = Drops::default();
        d.add(DropReason::Kernel, 95_988);
        p.add_drops("rx ", &d);
        p
    }

    #[test]
    fn the_page_shows_asked_and_achieved_and_a_row_per_port() {
        let s = render_text(&gen_page(), &CommandLine::new(true).prompt(), 100, 24);
        println!("{s}");
        assert!(
            s.contains("linerate gen -o afpacket:veth0 --rx afpacket:veth1"),
            "{s}"
        );
        assert!(
            s.contains(
                "Rate: asked 1'000'000 pps, achieved 998'000 pps (99.8%) (port-limited, 2.5 ms \
                 behind)"
            ),
            "{s}"
        );
        assert!(
            s.contains("Latency: p50 41.25 µs, p99 180.50 µs over 11'976'000 probes"),
            "{s}"
        );
        let row = |port: &str, dir: &str| -> Vec<String> {
            let l = s
                .lines()
                .find(|l| l.contains(port) && l.contains(&format!(" {dir} ")))
                .unwrap_or_else(|| panic!("no {port} {dir} row in {s}"));
            l.trim_matches(|c| c == '│' || c == ' ')
                .split_whitespace()
                .map(String::from)
                .collect()
        };
        assert_eq!(
            row("afpacket:veth0", "tx"),
            [
                "afpacket:veth0",
                "tx",
                "998'000",
                "543.11",
                "11'976'000",
                "0"
            ]
        );
        assert_eq!(
            row("afpacket:veth1", "rx"),
            [
                "afpacket:veth1",
                "rx",
                "990'001",
                "538.76",
                "11'880'012",
                "95'988"
            ]
        );
        assert!(
            s.lines()
                .any(|l| l.contains("rx kernel") && l.contains("95'988")),
            "{s}"
        );
        assert!(s.contains("keys: s start  p stop  r rate"), "{s}");
    }

    #[test]
    fn one_rate_when_asked_and_achieved_agree_and_a_read_only_page() {
        let mut p = gen_page();
        p.rate = Some(RateLine {
            asked: Some(1000.0),
            achieved: 1000.2,
        });
        p.status = None;
        let s = render_text(&p, &CommandLine::new(true).prompt(), 100, 24);
        assert!(s.contains("Rate: 1'000 pps, as asked"), "{s}");
        assert!(!s.contains("achieved"), "{s}");
        p.rate = Some(RateLine {
            asked: Some(0.0),
            achieved: 0.0,
        });
        let s = render_text(&p, &CommandLine::new(true).prompt(), 100, 24);
        assert!(s.contains("Rate: stopped (achieved 0 pps)"), "{s}");
        // fwd's page: no rate line, only quit.
        let fwd = Page {
            title: "linerate fwd -i mem:a -o mem:b".into(),
            state: "forwarding".into(),
            ports: gen_page().ports,
            ..Default::default()
        };
        let mut l = CommandLine::new(false);
        l.outcome("rate 1Mpps", &Err("read-only".into()));
        let s = render_text(&fwd, &l.prompt(), 100, 24);
        assert!(!s.contains("Rate:"), "{s}");
        assert!(s.contains("keys: q quit (or Ctrl-C)"), "{s}");
        assert!(s.contains("refused: rate 1Mpps: read-only"), "{s}");
        assert!(s.contains("none"), "{s}");
    }
}
