//! `--metrics ADDR` of every long-running tool: starts the endpoint, says where it is, and
//! warns when it is reachable from other hosts. What it serves is rendered with
//! [`linerate::stats::prom::Exposition`], whose common families every tool shares (names in
//! docs/metrics.md).
//!
//! Serving is [`linerate::stats::http::serve`]'s own thread; a tool either publishes a new text
//! from its statistics thread once per interval ([`Metrics::publish`]), or renders at each
//! scrape from counters its workers already keep ([`start_live`]). Nothing runs on the packet
//! path.

use super::usage;
use linerate::stats::http::{auth_note, serve, Endpoint};
use linerate::stats::prom::Exposition;
use std::sync::{Arc, Mutex};

/// The flag's help text, the same on every tool.
pub const HELP: &str = "Serve counters in Prometheus' text format at http://ADDR/metrics (e.g. \
                        127.0.0.1:9100; port 0 picks one); no authentication: keep it on loopback";

type Render = Box<dyn Fn(&mut Exposition) + Send + Sync>;

/// Starts the endpoint of `--metrics ADDR`, if given; it serves what [`Metrics::publish`] last
/// set (the common families at 0 until then).
pub fn start(addr: Option<&str>, tool: &str, quiet: bool) -> anyhow::Result<Option<Metrics>> {
    start_inner(addr, tool, quiet, None)
}

/// Like [`start`], but until the first [`Metrics::publish`] each scrape is rendered by `render`
/// (reading counters other threads keep); the final publish then fixes the text.
pub fn start_live(
    addr: Option<&str>,
    tool: &str,
    quiet: bool,
    render: impl Fn(&mut Exposition) + Send + Sync + 'static,
) -> anyhow::Result<Option<Metrics>> {
    start_inner(addr, tool, quiet, Some(Box::new(render)))
}

fn start_inner(
    addr: Option<&str>,
    tool: &str,
    quiet: bool,
    render: Option<Render>,
) -> anyhow::Result<Option<Metrics>> {
    let Some(addr) = addr else { return Ok(None) };
    let fixed: Arc<Mutex<Option<Arc<String>>>> = Arc::new(Mutex::new(None));
    let (f, t) = (fixed.clone(), tool.to_string());
    let endpoint = serve(addr, move || {
        // The lock is held only to copy a pointer.
        let text = f.lock().ok().and_then(|s| s.clone());
        match (text, &render) {
            (Some(s), _) => String::clone(&s),
            (None, Some(r)) => {
                let mut e = Exposition::new(&t);
                r(&mut e);
                e.render()
            }
            (None, None) => Exposition::new(&t).render(),
        }
    })
    .map_err(|e| usage(format!("--metrics {addr}: {e}")))?;
    if let Some(note) = auth_note(&endpoint.addr()) {
        eprintln!("linerate: {note}");
    }
    if !quiet {
        eprintln!("Metrics on http://{}/metrics", endpoint.addr());
    }
    Ok(Some(Metrics {
        endpoint,
        fixed,
        tool: tool.to_string(),
    }))
}

/// A running `--metrics` endpoint of one tool.
pub struct Metrics {
    endpoint: Endpoint,
    fixed: Arc<Mutex<Option<Arc<String>>>>,
    tool: String,
}

impl Metrics {
    /// An empty exposition naming this tool, to fill and [`Metrics::publish`].
    pub fn exposition(&self) -> Exposition {
        Exposition::new(&self.tool)
    }

    /// Serves `e` from now on.
    pub fn publish(&self, e: &Exposition) {
        let text = Arc::new(e.render());
        if let Ok(mut s) = self.fixed.lock() {
            *s = Some(text);
        }
    }

    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.endpoint.addr()
    }
}
