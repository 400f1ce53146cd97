//! The TCP program's rare events (`dra-ebpf/src/events.rs`) through BPF_PROG_TEST_RUN:
//! the aya-log records in `AYA_LOGS`, read with aya-log as `dra run` reads them. Each
//! event is logged with its flow and counter; a second one of a kind within a second
//! on the same CPU is counted but not logged.

use std::sync::{Arc, Mutex};

use aya_log::EbpfLogger;
use dra_common::{
    stats::Counter,
    wire::{app, cc_request_type as rt},
};
use dra_tests::{
    pkt::{Frame, ccr},
    support::{Hook, LAB_REALM, PCRF_REALM, lab_dra, load_object, run_xdp},
};

/// Collects the records aya-log hands over.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(log::Level, String)>>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        let line = r.args().to_string();
        self.0.lock().unwrap().push((r.level(), line));
    }
    fn flush(&self) {}
}

const ACK: u8 = 0x10;
const XDP_PASS: u32 = 2;

/// Keeps this thread on one CPU: the program's log gate is per CPU.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET on it and sched_setaffinity on this
    // thread (pid 0) with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

#[test]
fn rare_tcp_events_are_logged_once_a_second_and_all_counted() {
    pin_to_cpu0();
    let cfg = lab_dra("")
        .client("pgw1", LAB_REALM, &["198.18.1.2", "2001:db8:1::2"], "")
        .server("pcrf1", PCRF_REALM, "198.18.2.2:3868", "")
        .route("*", "peer = \"pcrf1\"")
        .to_string();
    let (mut ebpf, maps, _plan) = load_object(&cfg, "t.toml", Hook::Xdp);
    let got = Capture::default();
    let mut logger = EbpfLogger::init_with_logger(&mut ebpf, got.clone()).expect("AYA_LOGS");
    let f = Frame::v4("198.18.1.2", "198.18.1.1");
    let msg = ccr(app::GX, rt::UPDATE as u32, 1);
    let len = msg.len() as u32;
    let resync_before = maps.stat(Counter::Resync).unwrap();

    // Five flows without state, each resynchronised on its first segment.
    for port in 40_001..=40_005u16 {
        let (v, _) = run_xdp(&ebpf, &f.tcp(port, 3868, 1000, ACK, &[], &msg));
        assert_eq!(v, XDP_PASS);
    }
    // Flow 40001: invalid Diameter (version 7) where its next header should be.
    let mut bad = msg.clone();
    bad[0] = 7;
    let (v, _) = run_xdp(&ebpf, &f.tcp(40_001, 3868, 1000 + len, ACK, &[], &bad));
    assert_eq!(v, XDP_PASS, "invalid Diameter is passed");
    // Flow 40002: a segment 2 MiB past its next byte (a hole that cannot be a loss).
    let far = 1000 + len + (2 << 20);
    let (v, _) = run_xdp(&ebpf, &f.tcp(40_002, 3868, far, ACK, &[], &msg));
    assert_eq!(v, XDP_PASS, "an impossible hole gives up the state, passes");

    // A second later the gate is open again: an IPv6 flow's resync is logged.
    // The scenario: the log gate's second elapses before the next event.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let f6 = Frame::v4("2001:db8:1::2", "2001:db8:1::1");
    let (v, _) = run_xdp(&ebpf, &f6.tcp(40_006, 3868, 1000, ACK, &[], &msg));
    assert_eq!(v, XDP_PASS);

    logger.flush();
    let lines = got.0.lock().unwrap().clone();
    for (level, l) in &lines {
        println!("{level} {l}");
        assert_eq!(*level, log::Level::Debug, "{l}");
    }
    let with = |s: &str| lines.iter().filter(|(_, l)| l.contains(s)).count();
    // Counted: 5 resyncs on a header + the hole + IPv6; logged: the first resync of the
    // five, and the IPv6 one.
    assert_eq!(maps.stat(Counter::Resync).unwrap() - resync_before, 7);
    assert_eq!(with("no framing state"), 2, "{lines:?}");
    assert_eq!(
        with("198.18.1.2:40001 > 198.18.1.1:3868 proto 6: no framing state"),
        1,
        "the first flow's line names it: {lines:?}"
    );
    assert_eq!(
        with("198.18.1.2:40001 > 198.18.1.1:3868 proto 6: invalid Diameter"),
        1,
        "{lines:?}"
    );
    assert_eq!(maps.stat(Counter::MalformedDiameter).unwrap(), 1);
    assert_eq!(
        with("198.18.1.2:40002 > 198.18.1.1:3868 proto 6: hole older than 5 s or wider"),
        1,
        "{lines:?}"
    );
    assert_eq!(
        with("[2001:db8:1::2]:40006 > [2001:db8:1::1]:3868 proto 6: no framing state"),
        1,
        "{lines:?}"
    );
    assert_eq!(lines.len(), 4, "{lines:?}");
}
