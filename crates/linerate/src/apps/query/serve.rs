//! Queries over HTTP, stenoread's way: `POST /query` with the filter as the body, or
//! `GET /query?filter=EXPR&from=TIME&to=TIME&count=N`, answered with a pcap stream
//! (`Content-Type: application/vnd.tcpdump.pcap`, the connection closed at its end).
//!
//! Read-only: no request changes anything on disk (indexes are not written). Requests are
//! bounded (8 KiB of head, 64 KiB of body, 10 s to send them); a bad filter or time is a 400
//! with the reason (libpcap's message for a filter), another path 404, another method 405.
//! At most [`MAX_CLIENTS`] queries run at once (then 503). [`check_addr`] is the listener's
//! address policy: loopback unless the caller allows any.

use super::{Options, Query, QueryError};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most bytes of a request's line and headers.
pub const MAX_HEAD: usize = 8 << 10;
/// Most bytes of a request's body (the filter).
pub const MAX_BODY: usize = 64 << 10;
/// Most queries served at once.
pub const MAX_CLIENTS: usize = 8;
/// Time a client has to send its whole request (line, headers and body: a client sending a
/// byte now and then holds its slot no longer).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Time each [`WRITE_CHUNK`] of the answer may take to reach the client: one that does not read
/// (or reads slower) is dropped and its slot freed. A timeout on each send alone does not bound
/// it: the kernel takes a few bytes now and then (its buffers grow), each send makes progress.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of the answer written at once.
pub const WRITE_CHUNK: usize = 1 << 20;
/// Time an error answer waits for the rest of a refused request (read and dropped, so that
/// closing does not reset the connection before the client read the answer); the 503 of a
/// full server waits less, since the accepting thread sends it.
const DRAIN: Duration = Duration::from_secs(2);
const DRAIN_BUSY: Duration = Duration::from_millis(200);

/// Whether the endpoint may listen on `addr`: loopback addresses only, unless `any`.
pub fn check_addr(addr: &SocketAddr, any: bool) -> Result<(), String> {
    if any || addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "{addr} is not a loopback address: the query endpoint serves every packet of the \
             directory to whoever connects, without authentication; listen on 127.0.0.1 (and \
             put a proxy with authentication in front), or allow it with --serve-any"
        ))
    }
}

/// Serves queries over the captures of `dir` on `listener` until `stop` is set (checked
/// between connections). Each request's outcome is one line on standard error.
pub fn serve(dir: &Path, listener: TcpListener, stop: &AtomicBool) -> io::Result<()> {
    let busy = Arc::new(AtomicUsize::new(0));
    let dir: Arc<PathBuf> = Arc::new(dir.to_path_buf());
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Ok(mut s) = conn else { continue };
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            busy.fetch_sub(1, Ordering::AcqRel);
            let _ = s.set_write_timeout(Some(DRAIN_BUSY));
            let _ = respond_within(
                &mut s,
                503,
                "too many queries at once; try again\n",
                DRAIN_BUSY,
            );
            continue;
        }
        let (busy, dir) = (busy.clone(), dir.clone());
        std::thread::spawn(move || {
            let peer = s
                .peer_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            // The line holds the client's filter: control characters are escaped, so that a
            // filter cannot write lines of its own into the log.
            match handle(&dir, &mut s) {
                Ok(line) => eprintln!("query from {peer}: {}", printable(&line)),
                Err(e) => eprintln!("query from {peer}: {}", printable(&e.to_string())),
            }
            busy.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// `s` with its control characters escaped (`\n`, `\u{0}`), for the log.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A stream whose reads all end by one deadline: the socket's read timeout is what is left.
struct Deadline<'a> {
    s: &'a TcpStream,
    end: std::time::Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .end
            .saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.s.set_read_timeout(Some(left))?;
        (&mut &*self.s).read(buf)
    }
}

/// A socket whose every `write_all` ends within [`WRITE_TIMEOUT`].
struct DeadlineWriter<'a>(&'a TcpStream);

impl Write for DeadlineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.set_write_timeout(Some(WRITE_TIMEOUT))?;
        (&mut &*self.0).write(buf)
    }

    fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        let end = std::time::Instant::now() + WRITE_TIMEOUT;
        while !buf.is_empty() {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client took over {WRITE_TIMEOUT:?} to read {WRITE_CHUNK} bytes"),
                ));
            }
            self.0.set_write_timeout(Some(left))?;
            match (&mut &*self.0).write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn respond(s: &mut TcpStream, code: u16, msg: &str) -> io::Result<()> {
    respond_within(s, code, msg, DRAIN)
}

fn respond_within(s: &mut TcpStream, code: u16, msg: &str, drain: Duration) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \
         {}\r\nConnection: close\r\n\r\n",
        reason(code),
        msg.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(msg.as_bytes())?;
    s.flush()?;
    // Read (a bounded amount of) what the client still sends, so that closing does not reset
    // the connection before it read the answer.
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut d = Deadline {
        s,
        end: std::time::Instant::now() + drain,
    };
    let mut sink = [0u8; 4096];
    let mut left = 1usize << 20;
    while left > 0 {
        match d.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    Ok(())
}

/// A request: its method, path, query string and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// GET, POST...
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The query string's pairs, decoded.
    pub params: Vec<(String, String)>,
    /// The body (POST).
    pub body: Vec<u8>,
}

/// Where the head of a request ends in `buf`: (the end of its last line, the start of the
/// body), at the first empty line. A line ends in CRLF or in a bare LF: RFC 9112 (2.2) lets a
/// recipient take LF alone, and `printf 'GET /query HTTP/1.0\n\n' | nc` sends that.
fn head_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut start = 0;
    for (i, &b) in buf.iter().enumerate() {
        if b != b'\n' {
            continue;
        }
        let line = &buf[start..i];
        if line.is_empty() || line == b"\r" {
            return Some((start, i + 1));
        }
        start = i + 1;
    }
    None
}

/// Whether `head` holds a bare CR: a CR followed by anything but LF (a CR at its very end may
/// be followed by LF in the next read). RFC 9112 (2.2) has a recipient take it as invalid.
fn bare_cr(head: &[u8]) -> bool {
    head.windows(2).any(|w| w[0] == b'\r' && w[1] != b'\n')
}

const BARE_CR: &str = "a bare CR in the request head (end its lines in CRLF or LF)\n";

/// Reads and parses a request from `r`: Err((status, message)) when it is refused.
pub fn read_request<R: Read>(r: &mut R) -> Result<Request, (u16, String)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let (head_end, body_start) = loop {
        if let Some(e) = head_end(&buf) {
            if bare_cr(&buf[..e.1]) {
                return Err((400, BARE_CR.into()));
            }
            break e;
        }
        if bare_cr(&buf) {
            return Err((400, BARE_CR.into()));
        }
        if buf.len() > MAX_HEAD {
            return Err((431, format!("request head over {MAX_HEAD} bytes\n")));
        }
        let n = match r.read(&mut chunk) {
            Ok(0) => return Err((400, "request cut short\n".into())),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err((408, "request not sent in time\n".into()))
            }
            Err(e) => return Err((400, format!("{e}\n"))),
        };
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEAD {
        return Err((431, format!("request head over {MAX_HEAD} bytes\n")));
    }
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| (400, "request head is not UTF-8\n".to_string()))?;
    // Each line without its LF and the CR before it (a head of one line has neither).
    let mut lines = head
        .strip_suffix('\n')
        .unwrap_or(head)
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(ver), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err((400, "bad request line\n".into()));
    };
    if !ver.starts_with("HTTP/1.") {
        return Err((400, "HTTP/1.0 or HTTP/1.1 only\n".into()));
    }
    let mut length: Option<usize> = None;
    for h in lines {
        let Some((k, v)) = h.split_once(':') else {
            return Err((400, "bad header line\n".into()));
        };
        let k = k.trim().to_ascii_lowercase();
        if k == "content-length" {
            let n: usize = v
                .trim()
                .parse()
                .map_err(|_| (400, "bad Content-Length\n".to_string()))?;
            if length.is_some_and(|l| l != n) {
                return Err((400, "two different Content-Lengths\n".into()));
            }
            length = Some(n);
        } else if k == "transfer-encoding" {
            return Err((411, "send the body with a Content-Length\n".into()));
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect::<Result<Vec<_>, (u16, String)>>()?;
    let mut body = buf[body_start..].to_vec();
    let want = length.unwrap_or(0);
    if want > MAX_BODY {
        return Err((413, format!("body over {MAX_BODY} bytes\n")));
    }
    while body.len() < want {
        let n = match r.read(&mut chunk) {
            Ok(0) => return Err((400, "body cut short\n".into())),
            Ok(n) => n,
            Err(_) => return Err((408, "body not sent in time\n".into())),
        };
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(want);
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        params,
        body,
    })
}

/// Percent-decoding of a query string's part (`+` is a space).
fn decode(s: &str) -> Result<String, (u16, String)> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or((400, "bad percent-encoding\n".to_string()))?;
                out.push(h);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| (400, "query string is not UTF-8\n".to_string()))
}

/// The options of a request: `filter` (or the POST body), `from`, `to`, `count`.
pub fn options_of(req: &Request, now_ns: u64) -> Result<Options, String> {
    let mut o = Options::default();
    if req.method == "POST" {
        o.filter = String::from_utf8(req.body.clone())
            .map_err(|_| "the filter is not UTF-8".to_string())?
            .trim()
            .to_string();
    }
    for (k, v) in &req.params {
        match k.as_str() {
            "filter" | "bpf" => o.filter = v.clone(),
            "from" => {
                o.from = Some(super::parse_time(v, now_ns).map_err(|e| format!("from={v}: {e}"))?)
            }
            "to" => o.to = Some(super::parse_time(v, now_ns).map_err(|e| format!("to={v}: {e}"))?),
            "count" => {
                o.count = Some(
                    v.parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("count={v}: a number of packets, at least 1"))?,
                )
            }
            _ => return Err(format!("unknown parameter '{k}' (filter, from, to, count)")),
        }
    }
    // As the command line refuses them: no packet can be in between.
    if let (Some(f), Some(t)) = (o.from, o.to) {
        if f >= t {
            return Err(
                "from is not before to: no packet can be in between (from is \
                        inclusive, to exclusive)"
                    .into(),
            );
        }
    }
    Ok(o)
}

/// One connection: a request, its answer. Returns what to log.
fn handle(dir: &Path, s: &mut TcpStream) -> io::Result<String> {
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let read = read_request(&mut Deadline {
        s,
        end: std::time::Instant::now() + REQUEST_TIMEOUT,
    });
    let req = match read {
        Ok(r) => r,
        Err((code, msg)) => {
            respond(s, code, &msg)?;
            return Ok(format!("{code}: {}", msg.trim_end()));
        }
    };
    if req.path != "/query" {
        respond(s, 404, "the endpoint is /query\n")?;
        return Ok(format!("404: {}", req.path));
    }
    if req.method != "GET" && req.method != "POST" {
        respond(s, 405, "GET or POST /query\n")?;
        return Ok(format!("405: {}", req.method));
    }
    let opts = match options_of(&req, crate::time::wall_ns()) {
        Ok(o) => o,
        Err(e) => {
            respond(s, 400, &format!("{e}\n"))?;
            return Ok(format!("400: {e}"));
        }
    };
    let expr = opts.filter.clone();
    let mut q = match Query::prepare(dir, opts) {
        Ok(q) => q,
        Err(e @ QueryError::Filter(_)) => {
            respond(s, 400, &format!("{e}\n"))?;
            return Ok(format!("400: {e}"));
        }
        Err(e) => {
            respond(s, 500, &format!("{e}\n"))?;
            return Ok(format!("500: {e}"));
        }
    };
    s.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.tcpdump.pcap\r\nConnection: \
          close\r\n\r\n",
    )?;
    let out = super::Buffered::new(DeadlineWriter(s), WRITE_CHUNK);
    match q.run(out) {
        Ok((st, w)) => {
            w.into_inner()?.flush()?;
            // Files that could not be read: the answer holds the others', the log names them.
            let errors: String = st.errors.iter().map(|e| format!("; error: {e}")).collect();
            Ok(format!(
                "'{expr}': {} packets of {} tested, {} of {} bytes read, {} ms{}",
                st.packets_matched,
                st.packets_tested,
                st.bytes_read,
                st.bytes_total,
                st.elapsed_ns / 1_000_000,
                printable(&errors)
            ))
        }
        // The status is sent: the stream just ends.
        Err(e) => Ok(format!("'{expr}': stopped: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests() {
        let r = read_request(
            &mut &b"GET /query?filter=host+10.0.0.1%20and%20port%2053&from=-1h HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        )
        .unwrap();
        assert_eq!(r.path, "/query");
        assert_eq!(
            r.params[0],
            ("filter".into(), "host 10.0.0.1 and port 53".into())
        );
        let o = options_of(&r, 7_200_000_000_000).unwrap();
        assert_eq!(o.from, Some(3_600_000_000_000));
        let r =
            read_request(&mut &b"POST /query HTTP/1.1\r\nContent-Length: 8\r\n\r\nudp\nport"[..])
                .unwrap();
        assert_eq!(options_of(&r, 0).unwrap().filter, "udp\nport");
        for (bad, code) in [
            (&b"GET /query HTTP/1.1\r\n"[..], 400),
            (b"GET /query?filter=%zz HTTP/1.1\r\n\r\n", 400),
            (
                b"POST /query HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
                413,
            ),
            (
                b"POST /query HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                411,
            ),
            (b"GET /query SPDY/3\r\n\r\n", 400),
        ] {
            assert_eq!(read_request(&mut &bad[..]).unwrap_err().0, code);
        }
        let huge = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD + 10));
        assert_eq!(read_request(&mut huge.as_bytes()).unwrap_err().0, 431);
        let r = read_request(&mut &b"GET /query?to=banana HTTP/1.1\r\n\r\n"[..]).unwrap();
        assert!(options_of(&r, 0).unwrap_err().contains("to=banana"));
        assert!(check_addr(&"127.0.0.1:1".parse().unwrap(), false).is_ok());
        assert!(check_addr(&"[::1]:1".parse().unwrap(), false).is_ok());
        assert!(check_addr(&"0.0.0.0:1".parse().unwrap(), false).is_err());
        assert!(check_addr(&"0.0.0.0:1".parse().unwrap(), true).is_ok());
    }

    /// Lines ended by LF alone (`printf 'GET ... \n\n' | nc`), or mixed with CRLF, are taken
    /// as RFC 9112 lets a recipient take them: the head ends at the first empty line.
    #[test]
    fn lf_only_line_ends() {
        let r = read_request(&mut &b"GET /query?filter=udp HTTP/1.0\n\n"[..]).unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/query"));
        assert_eq!(r.params, vec![("filter".into(), "udp".into())]);
        let r = read_request(
            &mut &b"POST /query HTTP/1.1\nHost: x\r\nContent-Length: 3\n\r\ntcpEXTRA"[..],
        )
        .unwrap();
        assert_eq!(r.body, b"tcp");
        let r = read_request(&mut &b"GET /query HTTP/1.1\r\nHost: x\n\n"[..]).unwrap();
        assert_eq!(r.path, "/query");
        // A bare CR is refused at once, in a line end or inside a line.
        for bad in [
            &b"GET /query HTTP/1.0\r\r"[..],
            b"GET /query HTTP/1.1\r\nHost: a\rb\r\n\r\n",
        ] {
            let e = read_request(&mut &bad[..]).unwrap_err();
            assert_eq!(e, (400, BARE_CR.to_string()));
        }
        // A head with no empty line is still cut short.
        assert_eq!(
            read_request(&mut &b"GET /query HTTP/1.1\nHost: x\n"[..])
                .unwrap_err()
                .0,
            400
        );
    }
}
