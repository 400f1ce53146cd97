//! The fast path's overload shedding (dra-ebpf/src/overload.rs), run in the kernel
//! through BPF_PROG_TEST_RUN: the agent's writer (`FastPathShed`) sets the classes'
//! priorities and a shed plan, requests from a known gateway go through the XDP
//! dispatcher, and what the agent would see is checked — the mark in each request's
//! header flags byte (0x02 answered 3004, 0x04 discarded; TCP checksum still valid),
//! the out-of-band marks on the agent's own `OobInbox`, the counters it exports
//! (`judged()`, `shed()`, per-slot and global), and which buckets were charged.
//!
//! Shedding is deterministic per CPU (a credit per priority): each test pins its thread
//! to the CPU it runs on, so that every request meets the same credit.

use aya::Ebpf;
use dra::dataplane::overload::FastPathShed;
use dra::dataplane::{self, Maps, Plan};
use dra::diameter::{Avp, Message};
use dra::oob::{self, OobInbox};
use dra::overload::{Counts, PRIORITIES, Priorities, ShedPlan, ShedPort};
use dra_common::maps::{Action, BucketConfig, ClassCounters, OVERLOAD_ANSWER_SLOT};
use dra_common::stats::Counter;
use dra_common::wire::{MsgClass, app, avp, cc_request_type as rt, cmd, flags};
use dra_tests::pkt::{self, Frame, TCP_ACK, TCP_PSH, TCP_SYN};
use dra_tests::support::{lab_config, oob_inbox, run_xdp};

const PASS: u32 = 2;
const PGW1: &str = "198.18.1.2";
const DRA: &str = "198.18.1.1";
const ISN: u32 = 7000;
const SPORT: u16 = 40000;
/// The interval of pgw1's buckets (rate 0.01/s), ns.
const INTERVAL: u64 = 100_000_000_000;

const SHED: u8 = flags::OVERLOAD_SHED;
const DISCARD: u8 = flags::OVERLOAD_DISCARD;
const LIMITED: u8 = flags::RATE_LIMIT_MARK;

const CCR_I: MsgClass = MsgClass::gx_ccr(rt::INITIAL);
const CCR_T: MsgClass = MsgClass::gx_ccr(rt::TERMINATION);
const CCR_U: MsgClass = MsgClass::gx_ccr(rt::UPDATE);

/// pgw1's limits, all `reject` at one request per 100 s (each charge moves a bucket's
/// TAT by 100 s, so the charges are read back from its state): overall burst 10,000,
/// Gx CCR-T burst 1,000, Gx CCR-I burst `ccr_i_burst`. The `[overload]` section is the
/// default one: Gx/Gy CCR-T priority 4, CCR-U 8, CCR-I and CCR-E 12, others 8.
fn config(ccr_i_burst: u32) -> String {
    let limit = |rt: &str, burst: u32| {
        format!(
            "[[message_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             application = \"gx\"\ncommand = \"ccr\"\nrequest_type = \"{rt}\"\n\
             rate = 0.01\nburst = {burst}\n"
        )
    };
    lab_config()
        .with(
            "[[peer_rate_limit_profile]]\npeer = \"pgw1\"\ndirection = \"ingress\"\n\
             rate = 0.01\nburst = 10000\n",
        )
        .with(&limit("initial", ccr_i_burst))
        .with(&limit("termination", 1000))
        .to_string()
}

/// Pins the calling thread to the CPU it runs on: the shed credit is per CPU, and
/// BPF_PROG_TEST_RUN runs the program on the caller's CPU.
fn pin_to_this_cpu() {
    // SAFETY: plain syscalls on the calling thread with a zeroed, then filled, cpu set.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        let r = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(
            r,
            0,
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`, which the buckets use.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the struct it is given.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(r, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A shed plan: `share` of every priority in `prios`, nothing of the others.
fn shares(prios: impl IntoIterator<Item = usize>, share: f64) -> ShedPlan {
    let mut p = ShedPlan::NONE;
    for i in prios {
        p.shares[i] = share;
    }
    p
}

/// A Gx/Gy CCR like `pkt::ccr` (Hop-by-Hop 0x100 + n, End-to-End 0x200 + n) carrying a
/// DRMP AVP (RFC 7944) of value `drmp`: right after Session-Id (`before` true: the scan
/// reads it) or after CC-Request-Type (the scan has stopped by then).
fn ccr_drmp(app_id: u32, req_type: u32, n: u32, drmp: i32, before: bool) -> Vec<u8> {
    let drmp_avp = Avp::enumerated(avp::DRMP, drmp);
    let mut m = Message::request(cmd::CREDIT_CONTROL, app_id, 0x100 + n, 0x200 + n)
        .proxiable()
        .with(Avp::utf8(avp::SESSION_ID, &format!("pgw1.lab.example;1;{n}")).mandatory());
    if before {
        m = m.with(drmp_avp.clone());
    }
    m = m
        .with(Avp::u32(avp::AUTH_APPLICATION_ID, app_id).mandatory())
        .with(Avp::utf8(avp::ORIGIN_HOST, "pgw1.lab.example").mandatory())
        .with(Avp::utf8(avp::ORIGIN_REALM, "lab.example").mandatory())
        .with(Avp::utf8(avp::DESTINATION_REALM, "pcrf.lab.example").mandatory())
        .with(Avp::enumerated(avp::CC_REQUEST_TYPE, req_type as i32).mandatory());
    if !before {
        m = m.with(drmp_avp);
    }
    m.with(Avp::u32(avp::CC_REQUEST_NUMBER, n).mandatory())
        .encode()
}

/// `seg` (a TCP frame of `frame`) with `bit` set on the Diameter flags bytes at payload
/// offsets `flag_offs` and its TCP checksum recomputed from scratch (an independent
/// check of the kernel's incremental update; `pkt::expect_marked` for any mark bit).
fn expect_bit(seg: &[u8], frame: &Frame, flag_offs: &[usize], bit: u8) -> Vec<u8> {
    let mut out = seg.to_vec();
    let t = pkt::tcp_offset(seg);
    let doff = ((seg[t + 12] >> 4) as usize) * 4;
    for m in flag_offs {
        out[t + doff + m] |= bit;
    }
    out[t + 16] = 0;
    out[t + 17] = 0;
    let c = pkt::l4_checksum(frame.src, frame.dst, 6, &out[t..]);
    out[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    out
}

/// (seen, admitted, marked, dropped, shed_answered, shed_discarded) of a slot.
type Six = (u64, u64, u64, u64, u64, u64);

fn six(c: &ClassCounters) -> Six {
    (
        c.seen,
        c.admitted,
        c.marked,
        c.dropped,
        c.shed_answered,
        c.shed_discarded,
    )
}

fn sub6(a: Six, b: Six) -> Six {
    (
        a.0 - b.0,
        a.1 - b.1,
        a.2 - b.2,
        a.3 - b.3,
        a.4 - b.4,
        a.5 - b.5,
    )
}

fn sub_counts(a: Counts, b: Counts) -> Counts {
    std::array::from_fn(|i| a[i] - b[i])
}

/// Counts with `n` at each (priority, n) of `at`, 0 elsewhere.
fn counts(at: &[(usize, u64)]) -> Counts {
    let mut c = [0u64; PRIORITIES];
    for (p, n) in at {
        c[*p] += n;
    }
    c
}

/// The agent's eBPF object with the XDP programs loaded, pgw1's plan written, the
/// overload maps taken by the agent's own writer, and one gateway TCP connection
/// (pgw1:40000 → 198.18.1.1:3868) whose segments follow each other.
struct Harness {
    ebpf: Ebpf,
    maps: Maps,
    plan: Plan,
    shed: FastPathShed,
    priorities: Priorities,
    oob: OobInbox,
    f: Frame,
    /// Payload offset (after the SYN) of the next segment.
    next: u32,
}

impl Harness {
    fn new(ccr_i_burst: u32) -> Harness {
        pin_to_this_cpu();
        let cfg = dra::config::parse(&config(ccr_i_burst), "overload_fixtures.toml")
            .unwrap_or_else(|e| panic!("{e}"));
        let plan = Plan::new(&cfg).expect("plan");
        let mut ebpf = dataplane::open().expect("eBPF object");
        dataplane::load_xdp(&mut ebpf).expect("the verifier accepts XDP");
        // Before `Maps::take`, which keeps BUCKET_CONFIG.
        let shed = FastPathShed::take(&mut ebpf).expect("overload maps");
        let oob = oob_inbox(&mut ebpf);
        let mut maps = Maps::take(&mut ebpf).expect("maps");
        maps.write_plan(&plan).expect("write plan");
        maps.reset_buckets().unwrap();
        let priorities = cfg.overload.priorities.clone();
        assert!(cfg.overload.enabled, "[overload] is on by default");
        assert_eq!((priorities.of(CCR_I).0, priorities.of(CCR_U).0), (12, 8));
        assert_eq!(priorities.of(CCR_T).0, 4);
        shed.set_priorities(&priorities, true).unwrap();
        let mut h = Harness {
            ebpf,
            maps,
            plan,
            shed,
            priorities,
            oob,
            f: Frame::v4(PGW1, DRA),
            next: 0,
        };
        h.open();
        h
    }

    /// A new connection (SYN): its first segment starts at payload offset 0.
    fn open(&mut self) {
        let syn = self.f.tcp(SPORT, 3868, ISN, TCP_SYN, &[], &[]);
        assert_eq!(self.run(&syn).0, PASS, "SYN");
        self.next = 0;
    }

    fn run(&self, input: &[u8]) -> (u32, Vec<u8>) {
        run_xdp(&self.ebpf, input)
    }

    /// The next data segment of the connection, carrying `payload` (not sent).
    fn seg(&mut self, payload: &[u8]) -> Vec<u8> {
        let s = self.f.tcp(
            SPORT,
            3868,
            ISN + 1 + self.next,
            TCP_ACK | TCP_PSH,
            &[],
            payload,
        );
        self.next += payload.len() as u32;
        s
    }

    /// Sends `msg` alone in the next segment: it must pass; the mark bits it came out
    /// with in its header (0: none). Anything else changed, or a wrong TCP checksum,
    /// fails.
    fn send(&mut self, msg: &[u8]) -> u8 {
        let s = self.seg(msg);
        self.send_seg(&s)
    }

    /// Sends the segment `s`, holding one message at payload offset 0: its mark bits.
    fn send_seg(&self, s: &[u8]) -> u8 {
        let (v, out) = self.run(s);
        assert_eq!(v, PASS, "verdict");
        mark_of(s, &out, &self.f)
    }

    fn apply(&self, plan: &ShedPlan) {
        self.shed.apply(plan).unwrap();
    }

    fn slot(&self, class: Option<MsgClass>) -> u32 {
        let p = self.plan.peer("pgw1").unwrap();
        match class {
            None => p.info.overall_slot,
            Some(c) => self.plan.slot_of("pgw1", c).unwrap_or(p.info.other_slot),
        }
    }

    /// Slot counters of pgw1's `class` slot (None: its overall slot).
    fn six(&self, class: Option<MsgClass>) -> Six {
        six(&self.maps.slot_counters(self.slot(class)).unwrap())
    }

    fn stat(&self, c: Counter) -> u64 {
        self.maps.stat(c).unwrap()
    }

    /// Requests charged on one of pgw1's buckets (one request per [`INTERVAL`]) whose
    /// first charge came at or after `t0` (CLOCK_MONOTONIC) and less than an interval
    /// later: each charge moved its TAT by an interval. 0 for a bucket never charged.
    fn charges(&self, class: Option<MsgClass>, t0: u64) -> u64 {
        let slot = self.slot(class);
        let interval = self.maps.bucket_config(slot).unwrap().interval_ns;
        assert_eq!(interval, INTERVAL, "slot {slot}: one request per 100 s");
        let tat = self.maps.bucket_state(slot).unwrap().tat_ns;
        if tat == 0 {
            return 0;
        }
        tat.saturating_sub(t0) / interval
    }

    /// (answered, discarded) the agent's writer reads for the class labelled `label`.
    fn shed_of(&self, label: &str) -> (u64, u64) {
        let all = self.shed.shed();
        let c = all
            .iter()
            .find(|c| c.class == label)
            .unwrap_or_else(|| panic!("no shed counts for {label}: {all:?}"));
        (c.answered, c.discarded)
    }

    /// (answered, discarded) over every class.
    fn shed_total(&self) -> (u64, u64) {
        self.shed
            .shed()
            .iter()
            .fold((0, 0), |(a, d), c| (a + c.answered, d + c.discarded))
    }

    /// The out-of-band marks the programs wrote since the last call, for this
    /// connection over `proto` (TCP or SCTP): each (Hop-by-Hop, End-to-End) of `want`
    /// must be there with its bits, and nothing else.
    fn oob_marks(&self, proto: u8, want: &[(u32, u32, u8)]) -> Result<(), String> {
        let before = self.oob.stats().received;
        self.oob.drain();
        let got = self.oob.stats().received - before;
        let key = oob::flow_key_of(proto, (self.f.src, SPORT).into(), (self.f.dst, 3868).into());
        let mut wrong = Vec::new();
        for (h, e, bits) in want {
            let b = self.oob.take_bits(&key, *h, *e);
            if b != Some(*bits) {
                wrong.push(format!("({h:#x}, {e:#x}): bits {b:?}, want {bits:#x}"));
            }
        }
        self.oob.forget(&key);
        if got != want.len() as u64 || !wrong.is_empty() {
            return Err(format!(
                "{got} out-of-band marks, want {}; {}",
                want.len(),
                wrong.join("; ")
            ));
        }
        Ok(())
    }
}

/// The mark bits set on the flags byte of the message at payload offset 0 of `input`,
/// as `out` (the program's output) has them; fails if `out` differs from `input` in
/// anything but that byte and a TCP checksum recomputed from scratch.
fn mark_of(input: &[u8], out: &[u8], f: &Frame) -> u8 {
    if out == input {
        return 0;
    }
    assert_eq!(out.len(), input.len(), "output length");
    let t = pkt::tcp_offset(input);
    let flags_at = t + ((input[t + 12] >> 4) as usize) * 4 + 4;
    let bits = out[flags_at] & !input[flags_at];
    assert!(
        bits != 0 && bits & !flags::MARKS == 0,
        "flags byte {:#04x} → {:#04x}",
        input[flags_at],
        out[flags_at]
    );
    assert!(
        out == expect_bit(input, f, &[4], bits).as_slice(),
        "marked {bits:#x}: output differs from the input with that mark and a recomputed \
         checksum"
    );
    assert!(pkt::tcp_checksum_ok(out, f), "TCP checksum after marking");
    bits
}

/// Share per class: Gx CCR-I (priority 12) at half, CCR-T (priority 4) at nothing.
/// Every second CCR-I comes out marked 0x02 (to be answered 3004), checksum valid;
/// no CCR-T is touched, and the CCR-T are admitted and charged as usual. The shed
/// CCR-I charge no bucket. The writer reads N judged at 12 and N at 4, and N/2
/// CCR-I answered. A shed request's retransmission is marked again, not judged again.
#[test]
fn share_per_class() {
    const N: u32 = 20;
    let mut h = Harness::new(1000);
    h.apply(&shares([12], 0.5));
    let (i0, tt0, o0) = (h.six(Some(CCR_I)), h.six(Some(CCR_T)), h.six(None));
    let judged0 = h.shed.judged();
    let g0 = |h: &Harness| {
        [
            Counter::ShedAnswered,
            Counter::ShedDiscarded,
            Counter::Marked,
            Counter::Requests,
        ]
        .map(|c| h.stat(c))
    };
    let stats0 = g0(&h);
    let t0 = monotonic_ns();
    let mut marks_i = Vec::new();
    let mut marks_t = Vec::new();
    let mut segs_i = Vec::new();
    for k in 0..N {
        let s = h.seg(&pkt::ccr(app::GX, rt::INITIAL as u32, k));
        marks_i.push(h.send_seg(&s));
        segs_i.push(s);
        marks_t.push(h.send(&pkt::ccr(app::GX, rt::TERMINATION as u32, 100 + k)));
    }
    let elapsed = monotonic_ns() - t0;
    // The credit grows by a half per CCR-I: every second one is shed.
    let want_i: Vec<u8> = (0..N).map(|k| if k % 2 == 1 { SHED } else { 0 }).collect();
    assert_eq!(marks_i, want_i, "CCR-I marks");
    assert_eq!(
        marks_i.iter().filter(|b| **b == SHED).count(),
        N as usize / 2
    );
    assert_eq!(marks_t, vec![0; N as usize], "no CCR-T marked");

    let n = u64::from(N);
    assert_eq!(
        sub6(h.six(Some(CCR_I)), i0),
        (n, n / 2, 0, 0, n / 2, 0),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(
        sub6(h.six(Some(CCR_T)), tt0),
        (n, n, 0, 0, 0, 0),
        "CCR-T slot"
    );
    assert_eq!(
        sub6(h.six(None), o0),
        (2 * n, n + n / 2, 0, 0, n / 2, 0),
        "overall slot"
    );
    let stats = g0(&h);
    assert_eq!(
        std::array::from_fn::<u64, 4, _>(|i| stats[i] - stats0[i]),
        [n / 2, 0, 0, 2 * n],
        "shed_answered, shed_discarded, marked, requests"
    );
    // Charges: the admitted only (a shed request charges nothing).
    assert!(elapsed < INTERVAL, "the run took {elapsed} ns");
    assert_eq!(h.charges(Some(CCR_T), t0), n, "CCR-T charges");
    assert_eq!(h.charges(Some(CCR_I), t0), n / 2, "CCR-I charges");
    assert_eq!(h.charges(None, t0), n + n / 2, "overall charges");

    assert_eq!(
        sub_counts(h.shed.judged(), judged0),
        counts(&[(12, n), (4, n)]),
        "judged per priority"
    );
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (n / 2, 0),
        "shed() for gx_ccr_i (answered, discarded)"
    );
    assert_eq!(
        h.shed_of("gx_ccr_t"),
        (0, 0),
        "shed() for gx_ccr_t (answered, discarded)"
    );
    assert_eq!(
        h.shed_total(),
        (n / 2, 0),
        "shed() over every class (answered, discarded)"
    );

    // Retransmissions of the last two CCR-I: the shed one marked again, the admitted
    // one not; neither judged nor counted again.
    let judged = h.shed.judged();
    let last = N as usize - 1;
    assert_eq!(h.send_seg(&segs_i[last]), SHED, "retransmitted shed CCR-I");
    assert_eq!(
        h.send_seg(&segs_i[last - 1]),
        0,
        "retransmitted admitted CCR-I"
    );
    assert_eq!(h.shed.judged(), judged, "judged() per priority");
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (n / 2, 0),
        "shed() for gx_ccr_i (answered, discarded)"
    );
    assert_eq!(
        sub6(h.six(Some(CCR_I)), i0),
        (n, n / 2, 0, 0, n / 2, 0),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
}

/// DRMP (RFC 7944) before CC-Request-Type decides the priority: with priorities 8..15
/// shed entirely, a CCR-T carrying DRMP 12 right after Session-Id is shed (its class's 4
/// is not), a CCR-I carrying DRMP 0 is not (its class's 12 is), and a DRMP past 15
/// counts as the lowest (15). A DRMP after CC-Request-Type is not read: that CCR-I has
/// its class's priority and is shed. Shed requests count on their class.
#[test]
fn drmp_before_cc_request_type_sets_the_priority() {
    let mut h = Harness::new(1000);
    h.apply(&shares(8..PRIORITIES, 1.0));
    let judged0 = h.shed.judged();
    let cases: [(&str, Vec<u8>, u8); 6] = [
        ("CCR-T, no DRMP", pkt::ccr(app::GX, 3, 0), 0),
        ("CCR-I, no DRMP", pkt::ccr(app::GX, 1, 1), SHED),
        (
            "CCR-T, DRMP 12 first",
            ccr_drmp(app::GX, 3, 2, 12, true),
            SHED,
        ),
        ("CCR-I, DRMP 0 first", ccr_drmp(app::GX, 1, 3, 0, true), 0),
        (
            "CCR-I, DRMP 0 last",
            ccr_drmp(app::GX, 1, 4, 0, false),
            SHED,
        ),
        (
            "CCR-T, DRMP 20 first",
            ccr_drmp(app::GX, 3, 5, 20, true),
            SHED,
        ),
    ];
    let mut bad = Vec::new();
    for (name, msg, want) in &cases {
        let got = h.send(msg);
        if got != *want {
            bad.push(format!("{name}: mark {got:#x}, want {want:#x}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(
        sub_counts(h.shed.judged(), judged0),
        counts(&[(4, 1), (12, 3), (0, 1), (15, 1)]),
        "judged per priority"
    );
    assert_eq!(h.shed_of("gx_ccr_t"), (2, 0), "CCR-T shed by their DRMP");
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (2, 0),
        "shed() for gx_ccr_i (answered, discarded)"
    );
    assert_eq!(h.six(Some(CCR_T)), (3, 1, 0, 0, 2, 0), "CCR-T slot");
    assert_eq!(h.six(Some(CCR_I)), (3, 1, 0, 0, 2, 0), "CCR-I slot");
}

/// The answer budget: with every CCR-I shed and a budget of 0.1 answer/s with a burst of
/// 5, a burst of 20 CCR-I comes out as 5 marked 0x02 (answered 3004) and the rest 0x04
/// (discarded by the agent's reader); every counter the agent exports agrees. A
/// discarded request's retransmission keeps its mark and is judged and counted once. A
/// refilled budget answers again.
#[test]
fn answer_budget_then_discard() {
    const N: usize = 20;
    const BURST: usize = 5;
    let mut h = Harness::new(1000);
    h.maps
        .write_bucket(
            OVERLOAD_ANSWER_SLOT,
            BucketConfig::new(0.1, BURST as u32, Action::Reject),
        )
        .unwrap();
    h.apply(&shares([12], 1.0));
    let t0 = monotonic_ns();
    let mut segs = Vec::new();
    let mut marks = Vec::new();
    for k in 0..N {
        let s = h.seg(&pkt::ccr(app::GX, 1, k as u32));
        marks.push(h.send_seg(&s));
        segs.push(s);
    }
    // One more answer per 10 s the burst took (none on any machine that runs it in
    // less than 10 s).
    let refilled = ((monotonic_ns() - t0) / 10_000_000_000) as usize;
    let answered = marks.iter().filter(|b| **b == SHED).count();
    assert_eq!(
        &marks[..BURST],
        &[SHED; BURST],
        "the budget's burst is answered"
    );
    assert!(
        (BURST..=BURST + refilled).contains(&answered),
        "{answered} answered, want {BURST} (+ {refilled} refilled): {marks:x?}"
    );
    assert!(
        marks.iter().all(|b| *b == SHED || *b == DISCARD),
        "every CCR-I shed: {marks:x?}"
    );
    let (a, d) = (answered as u64, (N - answered) as u64);
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (a, d),
        "SHED_COUNTS (answered, discarded)"
    );
    assert_eq!(
        h.shed_total(),
        (a, d),
        "shed() over every class (answered, discarded)"
    );
    assert_eq!(
        (
            h.stat(Counter::ShedAnswered),
            h.stat(Counter::ShedDiscarded)
        ),
        (a, d),
        "global counters"
    );
    assert_eq!(h.stat(Counter::Requests), N as u64, "counter Requests");
    let n = N as u64;
    assert_eq!(h.six(Some(CCR_I)), (n, 0, 0, 0, a, d), "CCR-I slot");
    assert_eq!(h.six(None), (n, 0, 0, 0, a, d), "overall slot");
    assert_eq!(h.shed.judged(), counts(&[(12, n)]), "judged() per priority");

    // A retransmission: the same mark again (the flow remembers its last marks),
    // nothing judged or counted again.
    let last = N - 1;
    assert_eq!(marks[last], DISCARD, "the last CCR-I discarded");
    assert_eq!(
        h.send_seg(&segs[last]),
        DISCARD,
        "retransmitted discarded request"
    );
    assert_eq!(h.shed.judged(), counts(&[(12, n)]), "judged() per priority");
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (a, d),
        "shed() for gx_ccr_i (answered, discarded)"
    );
    assert_eq!(
        h.six(Some(CCR_I)),
        (n, 0, 0, 0, a, d),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );

    // The budget refilled: answered again.
    h.maps.reset_bucket(OVERLOAD_ANSWER_SLOT).unwrap();
    assert_eq!(
        h.send(&pkt::ccr(app::GX, 1, 50)),
        SHED,
        "answered after the budget refilled"
    );
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (a + 1, d),
        "shed() for gx_ccr_i (answered, discarded)"
    );
}

/// Never shed: base-protocol requests (DWR, application 0) and answers pass untouched
/// and are not even judged, with every priority shed entirely (a CCR-U, judged at 8,
/// shows the plan is live). With the overload control disabled, nothing is judged or
/// shed even though the plan sheds everything; enabled again, it sheds.
#[test]
fn base_protocol_and_disabled_never_shed() {
    let mut h = Harness::new(1000);
    let all = shares(0..PRIORITIES, 1.0);
    h.apply(&all);
    let other0 = h.six(Some(MsgClass::new(app::COMMON, cmd::DEVICE_WATCHDOG, 0)));
    for _ in 0..5 {
        assert_eq!(h.send(&pkt::dwr()), 0, "DWR marked");
    }
    assert_eq!(h.send(&pkt::cca(app::GX, 0)), 0, "answer marked");
    assert_eq!(h.shed.judged(), [0; PRIORITIES], "DWR or answer judged");
    assert_eq!(
        h.shed_total(),
        (0, 0),
        "shed() over every class (answered, discarded)"
    );
    assert_eq!(h.stat(Counter::ShedAnswered), 0, "counter ShedAnswered");
    let other = sub6(
        h.six(Some(MsgClass::new(app::COMMON, cmd::DEVICE_WATCHDOG, 0))),
        other0,
    );
    assert_eq!(other, (5, 5, 0, 0, 0, 0), "DWR admitted on the other slot");
    assert_eq!(h.send(&pkt::ccr(app::GX, 2, 0)), SHED, "the plan is live");
    assert_eq!(h.shed.judged(), counts(&[(8, 1)]), "judged() per priority");

    // Disabled: the plan written after it (active) changes nothing.
    h.shed.set_priorities(&h.priorities, false).unwrap();
    h.apply(&all);
    let judged0 = h.shed.judged();
    let shed0 = h.shed_total();
    let (i0, t0, u0) = (h.six(Some(CCR_I)), h.six(Some(CCR_T)), h.six(Some(CCR_U)));
    for k in 1..=4 {
        for r in [1, 2, 3] {
            assert_eq!(
                h.send(&pkt::ccr(app::GX, r, 10 * k + r)),
                0,
                "CC-Request-Type {r} marked with the overload control disabled"
            );
        }
    }
    assert_eq!(h.send(&ccr_drmp(app::GX, 1, 99, 15, true)), 0, "DRMP 15");
    assert_eq!(h.shed.judged(), judged0, "judged while disabled");
    assert_eq!(h.shed_total(), shed0, "shed while disabled");
    assert_eq!(
        sub6(h.six(Some(CCR_I)), i0),
        (5, 5, 0, 0, 0, 0),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(
        sub6(h.six(Some(CCR_T)), t0),
        (4, 4, 0, 0, 0, 0),
        "CCR-T slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(sub6(h.six(Some(CCR_U)), u0), (4, 4, 0, 0, 0, 0));

    h.shed.set_priorities(&h.priorities, true).unwrap();
    h.apply(&all);
    assert_eq!(h.send(&pkt::ccr(app::GX, 1, 98)), SHED, "enabled again");
}

/// Shed before the limits: CCR-I limited to a burst of 1 (`reject`, 0.01/s). With
/// every CCR-I shed, each comes out 0x02 and none 0x01, and neither the class bucket
/// nor the overall one is charged. With the plan back to nothing, the first CCR-I is
/// admitted (its bucket still full) and the second is over its limit (0x01).
#[test]
fn shed_requests_charge_no_bucket() {
    let mut h = Harness::new(1);
    h.apply(&shares([12], 1.0));
    let marks: Vec<u8> = (0..5).map(|k| h.send(&pkt::ccr(app::GX, 1, k))).collect();
    assert_eq!(
        marks,
        vec![SHED; 5],
        "every CCR-I shed, none over its limit"
    );
    assert_eq!(
        h.maps.bucket_state(h.slot(Some(CCR_I))).unwrap().tat_ns,
        0,
        "CCR-I bucket charged"
    );
    assert_eq!(
        h.maps.bucket_state(h.slot(None)).unwrap().tat_ns,
        0,
        "overall bucket charged"
    );
    assert_eq!(
        h.six(Some(CCR_I)),
        (5, 0, 0, 0, 5, 0),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(h.stat(Counter::Marked), 0, "counter Marked");

    h.apply(&ShedPlan::NONE);
    let t0 = monotonic_ns();
    assert_eq!(
        h.send(&pkt::ccr(app::GX, 1, 5)),
        0,
        "admitted: the bucket was full"
    );
    assert_eq!(
        h.send(&pkt::ccr(app::GX, 1, 6)),
        LIMITED,
        "then over its limit"
    );
    assert_eq!(h.charges(Some(CCR_I), t0), 1, "CCR-I charges");
    assert_eq!(h.charges(None, t0), 1, "overall charges");
    assert_eq!(
        h.six(Some(CCR_I)),
        (7, 1, 1, 0, 5, 0),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(
        h.shed.judged(),
        counts(&[(12, 7)]),
        "judged with no plan too"
    );
}

/// Out of band: a CCR-I whose flags byte passed in one segment and whose
/// CC-Request-Type comes in the next is shed through `OOB_MARKS` with the bits
/// OVERLOAD_SHED, neither segment touched; a CCR-T whose DRMP 12 came in the first
/// segment is shed too (the DRMP is kept across segments); beyond the answer budget
/// the bits are OVERLOAD_DISCARD. A CCR-I cut inside its header is marked in the
/// second segment's header.
#[test]
fn straddling_shed_goes_out_of_band() {
    let mut h = Harness::new(1000);
    // One answer, then none for 1,000 s.
    h.maps
        .write_bucket(
            OVERLOAD_ANSWER_SLOT,
            BucketConfig::new(0.001, 1, Action::Reject),
        )
        .unwrap();
    h.apply(&shares([12], 1.0));
    let _ = h.oob_marks(oob::IPPROTO_TCP, &[]);
    let mut bad = Vec::new();
    let cases = [
        ("CCR-I", pkt::ccr(app::GX, 1, 0), SHED),
        (
            "CCR-T, DRMP 12 in the first segment",
            ccr_drmp(app::GX, 3, 1, 12, true),
            DISCARD,
        ),
        ("CCR-I, budget spent", pkt::ccr(app::GX, 1, 2), DISCARD),
    ];
    for (k, (name, m, bits)) in cases.iter().enumerate() {
        let oob0 = h.stat(Counter::MarkedOutOfBand);
        let at = pkt::avp_offset(m, avp::CC_REQUEST_TYPE).unwrap() + 6;
        if let Some(d) = pkt::avp_offset(m, avp::DRMP) {
            assert!(d + 12 <= at, "{name}: DRMP in the first segment");
        }
        let (a, b) = m.split_at(at);
        let (sa, sb) = (h.seg(a), h.seg(b));
        for (which, s) in [("first", &sa), ("second", &sb)] {
            let (v, out) = h.run(s);
            if v != PASS || out != *s {
                bad.push(format!(
                    "{name}: {which} segment: verdict {v}, changed {}",
                    out != *s
                ));
            }
        }
        let k = k as u32;
        if let Err(e) = h.oob_marks(oob::IPPROTO_TCP, &[(0x100 + k, 0x200 + k, *bits)]) {
            bad.push(format!("{name}: {e}"));
        }
        if h.stat(Counter::MarkedOutOfBand) - oob0 != 1 {
            bad.push(format!("{name}: marked_out_of_band not counted once"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (1, 1),
        "shed() for gx_ccr_i (answered, discarded)"
    );
    assert_eq!(
        h.shed_of("gx_ccr_t"),
        (0, 1),
        "shed() for gx_ccr_t (answered, discarded)"
    );
    assert_eq!(h.shed.judged(), counts(&[(12, 3)]), "judged() per priority");

    // Cut after 3 bytes: the flags byte is in the segment that completes the class.
    let m = pkt::ccr(app::GX, 1, 3);
    let (a, b) = m.split_at(3);
    let sa = h.seg(a);
    let sb = h.seg(b);
    assert_eq!(
        h.run(&sa),
        (PASS, sa.clone()),
        "first segment passed untouched"
    );
    let (v, out) = h.run(&sb);
    assert_eq!(v, PASS);
    assert!(
        out == expect_bit(&sb, &h.f, &[1], DISCARD),
        "header mark in the second segment"
    );
    h.oob_marks(oob::IPPROTO_TCP, &[]).unwrap();
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (1, 2),
        "shed() for gx_ccr_i (answered, discarded)"
    );
}

/// SCTP: a bundle of a CCR-I and a CCR-T with CCR-I shed entirely: the packet passes,
/// the CCR-I is marked out of band with OVERLOAD_SHED, the CCR-T not at all.
#[test]
fn sctp_shed_out_of_band() {
    let h = Harness::new(1000);
    h.apply(&shares([12], 1.0));
    let _ = h.oob_marks(oob::IPPROTO_SCTP, &[]);
    let p = h.f.sctp(
        SPORT,
        3868,
        &[
            pkt::sctp_data(10, 46, &pkt::ccr(app::GX, 1, 0)),
            pkt::sctp_data(11, 46, &pkt::ccr(app::GX, 3, 1)),
        ],
    );
    let (v, out) = h.run(&p);
    assert_eq!((v, out == p), (PASS, true), "passed untouched");
    h.oob_marks(oob::IPPROTO_SCTP, &[(0x100, 0x200, SHED)])
        .unwrap();
    assert_eq!(
        h.six(Some(CCR_I)),
        (1, 0, 0, 0, 1, 0),
        "CCR-I slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(
        h.six(Some(CCR_T)),
        (1, 1, 0, 0, 0, 0),
        "CCR-T slot (seen, admitted, marked, dropped, shed answered, shed discarded)"
    );
    assert_eq!(
        h.shed.judged(),
        counts(&[(12, 1), (4, 1)]),
        "judged() per priority"
    );
    assert_eq!(
        h.shed_of("gx_ccr_i"),
        (1, 0),
        "shed() for gx_ccr_i (answered, discarded)"
    );
}
