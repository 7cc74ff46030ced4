//! The `--metrics ADDR` endpoint: a small HTTP/1.1 server on its own thread that answers
//! `GET /metrics` (and `GET /`) with the text a closure produces.
//!
//! One thread waits on every connection with poll(2), so an idle or slow client never holds up
//! another: at most [`MAX_CONNS`] connections are open at once (when full, the oldest one that
//! has not finished its request is closed to make room for the newcomer); a request must arrive
//! within [`READ_DEADLINE`] and its head fit in [`MAX_HEAD`] bytes (else `431`, closed); the
//! answer must be taken within [`WRITE_DEADLINE`]. The endpoint has no authentication: bind it
//! to loopback (the default of the tools) or see [`auth_note`]. Nothing here runs on the packet
//! path's threads; the closure runs on the server's thread.

use crate::sys::poll::poll;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections open at once.
pub const MAX_CONNS: usize = 64;
/// Largest request head (request line and headers), bytes.
pub const MAX_HEAD: usize = 8 << 10;
/// Time a client has to send its request head.
pub const READ_DEADLINE: Duration = Duration::from_secs(2);
/// Time a client has to take the answer.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// What the server did, for tests and for the curious.
#[derive(Debug, Default)]
pub struct HttpCounters {
    /// Requests answered (any status).
    pub answered: AtomicU64,
    /// Connections closed to make room (the limit was reached).
    pub evicted: AtomicU64,
    /// Requests refused for a head larger than [`MAX_HEAD`].
    pub too_large: AtomicU64,
    /// Connections closed at a deadline.
    pub timed_out: AtomicU64,
}

/// A running endpoint; the server thread stops when the last clone is dropped.
#[derive(Clone)]
pub struct Endpoint {
    addr: SocketAddr,
    counters: Arc<HttpCounters>,
    _stop: Arc<StopOnDrop>,
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl Endpoint {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What it did so far.
    pub fn counters(&self) -> &HttpCounters {
        &self.counters
    }
}

/// The note a tool prints when its endpoint listens on an address other than loopback, or
/// `None` on loopback.
pub fn auth_note(addr: &SocketAddr) -> Option<String> {
    if addr.ip().is_loopback() {
        return None;
    }
    Some(format!(
        "note: the metrics endpoint on {addr} has no authentication: anyone who can reach it \
         can read these counters (use 127.0.0.1:PORT to keep it local)"
    ))
}

/// Listens on `addr` (e.g. `127.0.0.1:9100`, port 0 for any) and serves the text `text()`
/// returns, in Prometheus' text format, on a thread of its own.
pub fn serve<F>(addr: &str, text: F) -> std::io::Result<Endpoint>
where
    F: Fn() -> String + Send + 'static,
{
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(HttpCounters::default());
    let (s, c) = (stop.clone(), counters.clone());
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || run(listener, &text, &s, &c))?;
    Ok(Endpoint {
        addr,
        counters,
        _stop: Arc::new(StopOnDrop(stop)),
    })
}

struct Conn {
    stream: TcpStream,
    since: Instant,
    head: Vec<u8>,
    /// The answer, once the request is in, and how much of it went out.
    out: Option<(Vec<u8>, usize)>,
}

fn run(listener: TcpListener, text: &dyn Fn() -> String, stop: &AtomicBool, c: &HttpCounters) {
    let mut conns: Vec<Conn> = Vec::with_capacity(MAX_CONNS);
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(MAX_CONNS + 1);
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        fds.clear();
        fds.push(libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for k in &conns {
            fds.push(libc::pollfd {
                fd: k.stream.as_raw_fd(),
                events: if k.out.is_some() {
                    libc::POLLOUT
                } else {
                    libc::POLLIN
                },
                revents: 0,
            });
        }
        // Wake at least every 200 ms to see the stop flag and the deadlines.
        if poll(&mut fds, 200).is_err() {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let now = Instant::now();
        // Serve the open connections first (their indices match fds[1..]).
        let mut close = vec![false; conns.len()];
        for (i, k) in conns.iter_mut().enumerate() {
            let ev = fds[i + 1].revents;
            close[i] = match &mut k.out {
                None if ev != 0 => read_head(k, &mut buf, text, c),
                Some(_) if ev != 0 => write_out(k),
                _ => false,
            };
            let limit = if k.out.is_some() {
                WRITE_DEADLINE
            } else {
                READ_DEADLINE
            };
            if !close[i] && now.duration_since(k.since) > limit {
                c.timed_out.fetch_add(1, Ordering::Relaxed);
                close[i] = true;
            }
        }
        let mut i = 0;
        conns.retain(|_| {
            i += 1;
            !close[i - 1]
        });
        // Then take every new connection, making room when full.
        if fds[0].revents != 0 {
            loop {
                let stream = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // Out of descriptors or the like: try again at the next wake.
                    Err(_) => break,
                };
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let _ = stream.set_nodelay(true);
                if conns.len() >= MAX_CONNS {
                    // The oldest connection still without a complete request goes.
                    let oldest = conns
                        .iter()
                        .enumerate()
                        .filter(|(_, k)| k.out.is_none())
                        .min_by_key(|(_, k)| k.since)
                        .map(|(j, _)| j);
                    match oldest {
                        Some(j) => {
                            conns.swap_remove(j);
                            c.evicted.fetch_add(1, Ordering::Relaxed);
                        }
                        None => {
                            // Every slot is answering: the newcomer waits for none of them.
                            c.evicted.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                    }
                }
                conns.push(Conn {
                    stream,
                    since: Instant::now(),
                    head: Vec::new(),
                    out: None,
                });
            }
        }
    }
}

/// Reads what the client sent; once the head is complete, prepares the answer and starts
/// sending it. Returns whether to close the connection.
fn read_head(k: &mut Conn, buf: &mut [u8], text: &dyn Fn() -> String, c: &HttpCounters) -> bool {
    loop {
        match k.stream.read(buf) {
            Ok(0) => return true,
            Ok(n) => {
                let room = MAX_HEAD + 4 - k.head.len();
                k.head.extend_from_slice(&buf[..n.min(room)]);
                if let Some(end) = find_end(&k.head) {
                    if end > MAX_HEAD {
                        return refuse_large(k, c);
                    }
                    let (status, body, head_only) = answer(&k.head[..end], text);
                    k.out = Some((response(status, &body, head_only), 0));
                    c.answered.fetch_add(1, Ordering::Relaxed);
                    return write_out(k);
                }
                if k.head.len() > MAX_HEAD {
                    return refuse_large(k, c);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

fn refuse_large(k: &mut Conn, c: &HttpCounters) -> bool {
    c.too_large.fetch_add(1, Ordering::Relaxed);
    c.answered.fetch_add(1, Ordering::Relaxed);
    let body = format!("request head larger than {MAX_HEAD} bytes\n");
    k.out = Some((
        response("431 Request Header Fields Too Large", &body, false),
        0,
    ));
    k.head = Vec::new();
    write_out(k)
}

/// Sends what is left of the answer. Returns whether to close (all sent, or an error).
fn write_out(k: &mut Conn) -> bool {
    let Some((out, done)) = &mut k.out else {
        return true;
    };
    while *done < out.len() {
        match k.stream.write(&out[*done..]) {
            Ok(0) => return true,
            Ok(n) => *done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
    let _ = k.stream.shutdown(std::net::Shutdown::Write);
    true
}

/// Offset just past the blank line that ends the head.
fn find_end(h: &[u8]) -> Option<usize> {
    h.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .or_else(|| {
            // Bare LF line ends, as some hand-typed clients send.
            h.windows(2).position(|w| w == b"\n\n").map(|p| p + 2)
        })
}

/// Status, body and whether to send the head only, for a request head.
fn answer(head: &[u8], text: &dyn Fn() -> String) -> (&'static str, String, bool) {
    let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = std::str::from_utf8(line).unwrap_or("").trim_end();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", "use GET /metrics\n".into(), false);
    }
    if path == "/metrics" || path == "/" {
        (("200 OK"), text(), method == "HEAD")
    } else {
        ("404 Not Found", "see /metrics\n".into(), method == "HEAD")
    }
}

fn response(status: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut o = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        o.extend_from_slice(body.as_bytes());
    }
    o
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(req).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    }

    #[test]
    fn answers_beside_idle_connections_and_refuses_large_heads() {
        let e = serve("127.0.0.1:0", || "x_total 1\n".to_string()).unwrap();
        // More idle connections than the limit, each sending half a request.
        let idle: Vec<TcpStream> = (0..MAX_CONNS * 2 + 2)
            .map(|_| {
                let mut s = TcpStream::connect(e.addr()).unwrap();
                let _ = s.write_all(b"GET /met");
                s
            })
            .collect();
        let t0 = Instant::now();
        let got = get(e.addr(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        assert!(got.starts_with("HTTP/1.1 200 OK"), "{got}");
        assert!(got.ends_with("\r\n\r\nx_total 1\n"), "{got}");
        assert!(e.counters().evicted.load(Ordering::Relaxed) >= MAX_CONNS as u64);
        drop(idle);
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_HEAD)
        );
        let got = get(e.addr(), big.as_bytes());
        assert!(got.starts_with("HTTP/1.1 431"), "{got}");
        let got = get(e.addr(), b"GET /nope HTTP/1.0\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 404"), "{got}");
        let got = get(e.addr(), b"POST /metrics HTTP/1.0\r\n\r\n");
        assert!(got.starts_with("HTTP/1.1 405"), "{got}");
        let got = get(e.addr(), b"HEAD /metrics HTTP/1.0\r\n\r\n");
        assert!(
            got.starts_with("HTTP/1.1 200") && got.ends_with("\r\n\r\n"),
            "{got}"
        );
    }

    #[test]
    fn auth_note_only_off_loopback() {
        assert!(auth_note(&"127.0.0.1:9100".parse().unwrap()).is_none());
        assert!(auth_note(&"[::1]:9100".parse().unwrap()).is_none());
        let n = auth_note(&"0.0.0.0:9100".parse().unwrap()).unwrap();
        assert!(n.contains("no authentication"), "{n}");
    }
}
