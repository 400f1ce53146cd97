//! CPU sample sources against real things: files, /proc, a real redis-server on
//! loopback, and a canned Prometheus HTTP server on loopback (a protocol test of our
//! client).
//!
//! Every process started here is owned by a guard that kills it on drop, also when an
//! assertion panics.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

mod support;

use dra::control::SourceError;
use dra::control::sources::{
    CpuSource, FileCpu, HostCpu, ProcessCpu, ProcessSelector, PrometheusCpu, RedisCpu,
};
use support::{RedisServer, TempDir, free_port, redis_command, redis_text};

// ---------------------------------------------------------------- helpers

/// A child process killed (and reaped) on drop.
struct ChildGuard(Child);

impl ChildGuard {
    fn spawn(cmd: &mut Command) -> Self {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scratch directory under cargo's target tmpdir (executables can run from it),
/// removed on drop.
fn scratch_dir() -> TempDir {
    TempDir::new_in(Path::new(env!("CARGO_TARGET_TMPDIR")), "control-sources-")
}

// ---------------------------------------------------------------- file

#[test]
fn file_source_reads_the_last_value_and_rejects_garbage() {
    let dir = scratch_dir();
    let path = dir.0.join("db-cpu");
    let mut src = FileCpu::new(&path);

    assert!(
        matches!(src.sample(), Err(SourceError::Io { .. })),
        "missing file"
    );

    std::fs::write(&path, "12.5\n").unwrap();
    assert_eq!(src.sample().unwrap(), Some(12.5));

    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    writeln!(f, "70%").unwrap();
    drop(f);
    assert_eq!(src.sample().unwrap(), Some(70.0), "the last line wins");

    std::fs::write(&path, "  \n 63 \n\n").unwrap();
    assert_eq!(
        src.sample().unwrap(),
        Some(63.0),
        "surrounding whitespace is tolerated"
    );

    std::fs::write(&path, "cpu is high\n").unwrap();
    assert!(matches!(src.sample(), Err(SourceError::Number { .. })));

    std::fs::write(&path, "").unwrap();
    assert!(matches!(src.sample(), Err(SourceError::Malformed { .. })));
}

// ---------------------------------------------------------------- procfs

/// Starts a busy shell loop from a copy of /bin/sh called `name`, so that it can be
/// found by its command name.
fn busy_process_named(dir: &Path, name: &str) -> ChildGuard {
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let exe = dir.join(name);
    std::fs::copy(&sh, &exe).unwrap();
    // A fork elsewhere in this multi-threaded test binary can briefly hold the copy's
    // write descriptor: retry ETXTBSY.
    for _ in 0..50 {
        match Command::new(&exe)
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => return ChildGuard(child),
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("spawn {}: {e}", exe.display()),
        }
    }
    panic!("spawn {}: text file busy", exe.display());
}

#[test]
fn procfs_busy_process_by_pid_pidfile_and_name() {
    let dir = scratch_dir();
    let name = format!("drabusy{}", std::process::id() % 100_000);
    let busy = busy_process_named(&dir.0, &name);
    let pidfile = dir.0.join("busy.pid");
    std::fs::write(&pidfile, format!("{}\n", busy.pid())).unwrap();

    let mut sources = [
        ProcessCpu::new(ProcessSelector::Pid(busy.pid())),
        ProcessCpu::new(ProcessSelector::PidFile(pidfile.clone())),
        ProcessCpu::new(ProcessSelector::Name(name.clone())),
    ];
    for src in &mut sources {
        assert_eq!(
            src.sample().unwrap(),
            None,
            "{}: first reading has no delta",
            src.describe()
        );
    }
    thread::sleep(Duration::from_millis(300));
    for src in &mut sources {
        let v = src.sample().unwrap().expect("second reading gives a value");
        assert!(
            v > 30.0,
            "{}: a busy loop measured {v:.1}% of a core",
            src.describe()
        );
        assert!(
            v < 105.0,
            "{}: one single-threaded process, {v:.1}%",
            src.describe()
        );
    }

    drop(busy);
    let mut gone = ProcessCpu::new(ProcessSelector::Name(name));
    assert!(matches!(gone.sample(), Err(SourceError::NoProcess { .. })));
    std::fs::write(&pidfile, "not-a-pid").unwrap();
    assert!(matches!(
        sources[1].sample(),
        Err(SourceError::Malformed { .. })
    ));
}

#[test]
fn procfs_idle_process_is_near_zero() {
    let idle = ChildGuard::spawn(Command::new("sleep").arg("5"));
    let mut src = ProcessCpu::new(ProcessSelector::Pid(idle.pid()));
    assert_eq!(src.sample().unwrap(), None);
    thread::sleep(Duration::from_millis(300));
    let v = src.sample().unwrap().unwrap();
    assert!((0.0..5.0).contains(&v), "sleep measured {v:.1}%");
}

#[test]
fn procfs_host_cpu_is_a_percentage() {
    let mut src = HostCpu::new();
    assert_eq!(src.sample().unwrap(), None);
    thread::sleep(Duration::from_millis(200));
    let v = src.sample().unwrap().expect("ticks elapsed in 200 ms");
    assert!((0.0..=100.0).contains(&v), "host CPU {v}");
}

// ---------------------------------------------------------------- redis

/// `threads` clients keeping the server busy for `dur`: each runs a Lua loop of SETs
/// inside Redis (`EVAL`), so the work is Redis' own whatever the client's speed.
fn load_redis(port: u16, threads: usize, dur: Duration) {
    const SCRIPT: &str = "for i = 1, 20000 do redis.call('SET', KEYS[1], i) end return 1";
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                let mut conn = client.get_connection().unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut eval = redis::cmd("EVAL");
                eval.arg(SCRIPT).arg(1).arg(format!("k{i}"));
                let start = Instant::now();
                while start.elapsed() < dur {
                    let done: i64 = eval.query(&mut conn).unwrap();
                    assert_eq!(done, 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn redis_cpu_is_measured_and_rises_under_load() {
    let server = RedisServer::start();
    let mut src = RedisCpu::new(server.addr.to_string());
    assert_eq!(src.sample().unwrap(), None, "first INFO cpu has no delta");
    thread::sleep(Duration::from_millis(500));
    let idle = src.sample().unwrap().expect("second reading gives a value");
    assert!((0.0..=100.0).contains(&idle), "idle redis CPU {idle}");

    load_redis(server.port, 4, Duration::from_millis(1500));
    let loaded = src.sample().unwrap().unwrap();
    eprintln!("redis CPU idle {idle:.2}%, under load {loaded:.2}%");
    assert!(
        loaded > idle + 10.0,
        "loaded {loaded:.1}% vs idle {idle:.1}%"
    );

    // Our connection is killed server-side: one error, then a transparent reconnect.
    let killed = redis_command(
        server.port,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    );
    assert!(
        matches!(killed, Ok(redis::Value::Int(n)) if n >= 1),
        "CLIENT KILL answered {killed:?}"
    );
    assert!(src.sample().is_err(), "the killed connection is reported");
    let v = src
        .sample()
        .unwrap()
        .expect("counters continue after reconnecting");
    assert!(v >= 0.0);

    // AUTH: without a password the server refuses, with it the source works.
    assert_eq!(
        redis_text(server.port, &["CONFIG", "SET", "requirepass", "s3cret"]).as_deref(),
        Some("OK")
    );
    let mut noauth = RedisCpu::new(server.addr.to_string());
    assert!(matches!(noauth.sample(),
            Err(SourceError::Remote { detail, .. }) if detail.starts_with("NOAUTH")));
    let mut wrong = RedisCpu::new(server.addr.to_string()).with_auth(None, "nope".into());
    assert!(matches!(wrong.sample(), Err(SourceError::Remote { .. })));
    let mut auth = RedisCpu::new(server.addr.to_string()).with_auth(None, "s3cret".into());
    assert_eq!(auth.sample().unwrap(), None);
    assert!(auth.sample().is_ok());
}

#[test]
fn redis_down_is_an_error_and_recovers_when_it_comes_up() {
    let port = free_port();
    let mut src =
        RedisCpu::new(format!("127.0.0.1:{port}")).with_timeout(Duration::from_millis(500));
    assert!(matches!(src.sample(), Err(SourceError::Io { .. })));
    // Start a server on that port (fails loudly if it was taken).
    let redis = RedisServer::start_on(port);
    assert_eq!(src.sample().unwrap(), None, "reconnected; first reading");
    assert!(src.sample().is_ok());
    drop(redis);
    assert!(src.sample().is_err(), "server gone");
}

// ---------------------------------------------------------------- prometheus

/// Serves one canned response per connection, in order, recording each request head.
fn canned_http_server(
    responses: Vec<Vec<u8>>,
) -> (u16, mpsc::Receiver<String>, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        for response in responses {
            let (mut conn, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            tx.send(head).unwrap();
            conn.write_all(&response).unwrap();
        }
    });
    (port, rx, handle)
}

fn http(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn http_chunked(body: &str) -> Vec<u8> {
    let (a, b) = body.split_at(body.len() / 2);
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    )
    .into_bytes()
}

#[test]
fn prometheus_instant_query_values_and_errors() {
    let responses = vec![
        http(
            "200 OK",
            concat!(
                r#"{"status":"success","data":{"resultType":"scalar","#,
                r#""result":[1700000000.123,"62.5"]}}"#
            ),
        ),
        http_chunked(concat!(
            r#"{"status":"success","data":{"resultType":"vector","#,
            r#""result":[{"metric":{"instance":"db1"},"value":[1700000001,"49"]}]}}"#
        )),
        http(
            "400 Bad Request",
            concat!(
                r#"{"status":"error","errorType":"bad_data","#,
                r#""error":"1:5: parse error: unexpected right brace"}"#
            ),
        ),
        http(
            "200 OK",
            concat!(
                r#"{"status":"success","data":{"resultType":"matrix","#,
                r#""result":[{"metric":{},"values":[[1,"1"],[2,"2"]]}]}}"#
            ),
        ),
        http(
            "200 OK",
            concat!(
                r#"{"status":"success","data":{"resultType":"vector","result":["#,
                r#"{"metric":{"i":"a"},"value":[1,"1"]},{"metric":{"i":"b"},"value":[1,"2"]}]}}"#
            ),
        ),
        http(
            "200 OK",
            r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
        ),
    ];
    let (port, requests, server) = canned_http_server(responses);
    let query = r#"100 * (1 - avg(rate(node_cpu_seconds_total{mode="idle"}[1m])))"#;
    let mut src = PrometheusCpu::new(&format!("http://127.0.0.1:{port}/prom"), query).unwrap();

    assert_eq!(src.sample().unwrap(), Some(62.5), "scalar");
    let head = requests.recv().unwrap();
    let request_line = head.lines().next().unwrap();
    assert_eq!(
        request_line,
        "GET /prom/api/v1/query?query=100%20%2A%20%281%20-%20avg%28rate%28node_cpu_seconds_total\
         %7Bmode%3D%22idle%22%7D%5B1m%5D%29%29%29 HTTP/1.1"
    );
    assert!(
        head.contains(&format!("Host: 127.0.0.1:{port}\r\n")),
        "{head}"
    );

    assert_eq!(
        src.sample().unwrap(),
        Some(49.0),
        "one-element vector, chunked body"
    );

    let err = src.sample().unwrap_err();
    assert!(
        matches!(&err, SourceError::Remote { detail, .. }
            if detail.contains("400") && detail.contains("bad_data")),
        "{err}"
    );
    let err = src.sample().unwrap_err();
    assert!(
        matches!(&err, SourceError::Malformed { detail, .. } if detail.contains("matrix")),
        "{err}"
    );
    let err = src.sample().unwrap_err();
    assert!(
        matches!(&err, SourceError::Malformed { detail, .. } if detail.contains("2 series")),
        "{err}"
    );
    let err = src.sample().unwrap_err();
    assert!(
        matches!(&err, SourceError::Malformed { detail, .. } if detail.contains("no series")),
        "{err}"
    );

    server.join().unwrap();
    assert!(
        matches!(src.sample(), Err(SourceError::Io { .. })),
        "server gone: connection refused"
    );
}

#[test]
fn prometheus_silent_server_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts (kernel backlog) but never answers.
    let mut src = PrometheusCpu::new(&format!("http://127.0.0.1:{port}"), "up")
        .unwrap()
        .with_timeout(Duration::from_millis(200));
    let err = src.sample().unwrap_err();
    assert!(
        matches!(&err, SourceError::Io { source, .. }
        if matches!(
            source.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "{err:?}"
    );
    drop(listener);
}
