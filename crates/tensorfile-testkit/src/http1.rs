//! The HTTP/1.1 plumbing the stand-ins share: reading a request
//! ([`Request::read`]) and serving connections on 127.0.0.1 in the
//! background until dropped ([`Listener`], [`Background`]). What each
//! stand-in answers stays in its own module.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A request as read.
pub(crate) struct Request {
    /// `GET`, `PUT`, ... (empty if the request line has none).
    pub(crate) method: String,
    /// The path and query, as sent.
    pub(crate) target: String,
    /// Headers, names lowercased (of a repeated one, the last).
    pub(crate) headers: BTreeMap<String, String>,
    /// The body: `Content-Length` bytes, or the chunks of a chunked one.
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// Reads the next request of a connection; `None` where the stream
    /// ends before the head does. Header lines without a colon are
    /// skipped. Of a `Content-Length` body at most `max_body` bytes are
    /// read (a stand-in's guard against a huge length; the rest is left
    /// in the stream); a chunked body longer than that is an error.
    ///
    /// # Errors
    /// Reading fails (a timeout too), the stream ends inside the body, or
    /// a chunk's size is not hex.
    pub(crate) fn read(
        reader: &mut impl BufRead,
        max_body: usize,
    ) -> std::io::Result<Option<Request>> {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(None);
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let chunked = headers
            .get("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            read_chunked(reader, max_body)?
        } else {
            let len: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len.min(max_body)];
            reader.read_exact(&mut body)?;
            body
        };
        Ok(Some(Request {
            method,
            target,
            headers,
            body,
        }))
    }
}

/// A chunked body: sizes in hex (extensions after `;` ignored), each chunk
/// followed by CRLF, ended by a chunk of size 0 (trailers are not read).
fn read_chunked(reader: &mut impl BufRead, max_body: usize) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if n > max_body - body.len() {
            return Err(std::io::Error::other("chunked body too long"));
        }
        let mut chunk = vec![0u8; n + 2];
        reader.read_exact(&mut chunk)?;
        if n == 0 {
            return Ok(body);
        }
        body.extend_from_slice(&chunk[..n]);
    }
}

/// `%XX` decoded (a `%` not followed by two hex digits stays), as paths
/// and headers carry names.
pub(crate) fn percent_decode(s: &str) -> String {
    decode(s, false)
}

/// A form's or a query's value: `+` is a space, `%XX` decoded.
pub(crate) fn form_decode(s: &str) -> String {
    decode(s, true)
}

fn decode(s: &str, plus_is_space: bool) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `t` in UTC: year, month, day, days since 1970, seconds into the day.
pub(crate) fn civil(t: SystemTime) -> (i64, i64, i64, i64, i64) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, days, secs.rem_euclid(86_400))
}

/// RFC 1123 (`Last-Modified`, `x-ms-date`).
pub(crate) fn http_date(t: SystemTime) -> String {
    let (y, m, d, days, rem) = civil(t);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][(m - 1) as usize];
    format!(
        "{weekday}, {d:02} {month} {y} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A bound listener on 127.0.0.1 at a port the OS chose, not accepting
/// yet: its port can be known (and handed to what will serve it) first.
pub(crate) struct Listener {
    listener: TcpListener,
    port: u16,
}

impl Listener {
    /// Binds `127.0.0.1:0`.
    ///
    /// # Errors
    /// No port can be bound.
    pub(crate) fn bind() -> std::io::Result<Listener> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        Ok(Listener { listener, port })
    }

    /// The port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Accepts on a thread of its own until `stop` is set, serving each
    /// connection with `serve` on a thread of its own (its error only
    /// ends that connection). `serve` gets `stop` too, to end waits when
    /// the server stops.
    pub(crate) fn serve<F>(self, stop: Arc<AtomicBool>, serve: F) -> Background
    where
        F: Fn(TcpStream, &AtomicBool) -> std::io::Result<()> + Send + Sync + 'static,
    {
        let Listener { listener, port } = self;
        let serve = Arc::new(serve);
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (serve, stop) = (serve.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let _ = serve(stream, &stop);
                    });
                }
            })
        };
        Background {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

/// A listener serving in the background ([`Listener::serve`]). Dropping it
/// sets the stop flag, wakes the accepting thread with a connection and
/// waits for it to end; connections already open end as their `serve`
/// does.
pub(crate) struct Background {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Background(127.0.0.1:{})", self.port)
    }
}

impl Background {
    /// Binds `127.0.0.1:0` and serves it with a stop flag of its own
    /// ([`Listener::serve`]).
    ///
    /// # Errors
    /// No port can be bound.
    pub(crate) fn start<F>(serve: F) -> std::io::Result<Background>
    where
        F: Fn(TcpStream, &AtomicBool) -> std::io::Result<()> + Send + Sync + 'static,
    {
        Ok(Listener::bind()?.serve(Arc::default(), serve))
    }

    /// The port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread so that it sees the flag.
        let _ =
            TcpStream::connect_timeout(&([127, 0, 0, 1], self.port).into(), Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read, Write};

    fn read(text: &str, max_body: usize) -> std::io::Result<Option<Request>> {
        Request::read(&mut BufReader::new(text.as_bytes()), max_body)
    }

    #[test]
    fn reads_heads_and_both_kinds_of_body() {
        let r = read(
            "POST /a?b=c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nno colon\r\n\r\nabcdef",
            100,
        )
        .unwrap()
        .unwrap();
        assert_eq!((r.method.as_str(), r.target.as_str()), ("POST", "/a?b=c"));
        assert_eq!(r.headers["host"], "x");
        assert_eq!(r.headers.len(), 2);
        assert_eq!(r.body, b"abc");

        let r = read(
            "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            100,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.body, b"abcde");
    }

    #[test]
    fn ends_limits_and_refuses() {
        assert!(read("", 100).unwrap().is_none());
        assert!(read("GET / HTTP/1.1\r\nHost: x\r\n", 100)
            .unwrap()
            .is_none());
        // A length over the limit: the limit is read, the rest left.
        let mut reader = BufReader::new(&b"PUT / HTTP/1.1\r\ncontent-length: 6\r\n\r\nabcdef"[..]);
        assert_eq!(
            Request::read(&mut reader, 4).unwrap().unwrap().body,
            b"abcd"
        );
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "ef");
        let chunked = "PUT / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(read(&format!("{chunked}5\r\nabcde\r\n0\r\n\r\n"), 4).is_err());
        assert!(read(&format!("{chunked}zz\r\n"), 100).is_err());
        assert!(read("PUT / HTTP/1.1\r\ncontent-length: 9\r\n\r\nabc", 100).is_err());
    }

    #[test]
    fn decodes_and_dates() {
        assert_eq!(percent_decode("a%2Fb+c%zz%4"), "a/b+c%zz%4");
        assert_eq!(form_decode("a%2Bb+c%3d"), "a+b c=");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3661);
        assert_eq!(civil(t), (2000, 2, 29, 11_016, 3661));
        assert_eq!(http_date(t), "Tue, 29 Feb 2000 01:01:01 GMT");
    }

    #[test]
    fn serves_until_dropped() {
        let server = Background::start(|mut stream, _| {
            let mut reader = BufReader::new(stream.try_clone()?);
            while let Some(r) = Request::read(&mut reader, 100)? {
                write!(stream, "{} {}|", r.method, r.body.len())?;
            }
            Ok(())
        })
        .unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
        c.write_all(b"PUT /x HTTP/1.1\r\ncontent-length: 2\r\n\r\nhi")
            .unwrap();
        c.write_all(b"GET /y HTTP/1.1\r\n\r\n").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut got = String::new();
        c.read_to_string(&mut got).unwrap();
        assert_eq!(got, "PUT 2|GET 0|");
        let port = server.port();
        drop(server);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
