//! The flood generator: prebuilt Ethernet/IPv4/TCP frames sent with `sendmmsg` on an
//! `AF_PACKET` socket (protocol 0: it receives nothing; `PACKET_QDISC_BYPASS`) bound to
//! the sender side of a veth, from one or more threads that entered the sender's
//! network namespace.
//!
//! Three kinds of frame, all to the DRA's Diameter port:
//!
//! - `syn`: a SYN (MSS, SACK-permitted, timestamps, window scale, as Linux sends them)
//!   from a source that is no configured peer (a spoofed SYN flood);
//! - `junk`: an ACK|PSH segment with random sequence numbers and 32–300 bytes of random
//!   payload from such a source (garbage for the listener);
//! - `peer_syn`: a SYN from a configured peer's address (a reconnect storm beyond its
//!   connection guard).
//!
//! Each frame's source port moves on by one every time it is sent (TCP checksum updated
//! incrementally, RFC 1624), so every SYN is a new connection attempt, never a
//! retransmission of an earlier one.

use std::{
    net::Ipv4Addr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

const ETH_HLEN: usize = 14;
const IP_HLEN: usize = 20;
const TCP_SPORT: usize = ETH_HLEN + IP_HLEN;
const TCP_CSUM: usize = TCP_SPORT + 16;
const TCP_SYN: u8 = 0x02;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
/// Frames per `sendmmsg` call.
const BATCH: usize = 64;
/// Frames prebuilt per thread (a multiple of [`BATCH`]).
const POOL: usize = 1024;
/// Lowest source port used.
const PORT_MIN: u16 = 1024;

/// What a flood frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Syn,
    Junk,
    PeerSyn,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Syn => "syn",
            Kind::Junk => "junk",
            Kind::PeerSyn => "peer_syn",
        }
    }
}

/// Where the frames go and where they come from.
#[derive(Clone, Debug)]
pub struct Target {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub dst_ip: Ipv4Addr,
    pub dst_port: u16,
    /// Non-peer sources: `spoof_base` + 0 .. `spoof_count`.
    pub spoof_base: Ipv4Addr,
    pub spoof_count: u32,
    /// The configured peer of the reconnect storm.
    pub peer_ip: Ipv4Addr,
    /// The mix: one frame in `mix.len()` of each listed kind, in turn.
    pub mix: Vec<Kind>,
}

/// SplitMix64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Ones' complement sum of `data` (big-endian 16-bit words) added to `sum`.
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The TCP checksum of `seg` (header + payload, checksum field zero) over the IPv4
/// pseudo-header.
fn tcp_checksum(src: Ipv4Addr, dst: Ipv4Addr, seg: &[u8]) -> u16 {
    let mut s = sum16(0, &src.octets());
    s = sum16(s, &dst.octets());
    s += 6 + seg.len() as u32;
    fold(sum16(s, seg))
}

/// RFC 1624 eqn. 3: the checksum after one 16-bit word changed from `old` to `new`.
fn csum_replace(check: u16, old: u16, new: u16) -> u16 {
    let sum = u32::from(!check) + u32::from(!old) + u32::from(new);
    fold(sum)
}

/// One Ethernet/IPv4/TCP frame, checksums filled in.
#[allow(clippy::too_many_arguments)]
fn frame(
    t: &Target,
    src: Ipv4Addr,
    sport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    options: &[u8],
    payload: &[u8],
    ip_id: u16,
) -> Vec<u8> {
    let tcp_len = 20 + options.len() + payload.len();
    let mut f = Vec::with_capacity(ETH_HLEN + IP_HLEN + tcp_len);
    f.extend_from_slice(&t.dst_mac);
    f.extend_from_slice(&t.src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (IP_HLEN + tcp_len) as u16;
    let mut ip = [0u8; IP_HLEN];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&ip_id.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&t.dst_ip.octets());
    let c = fold(sum16(0, &ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = Vec::with_capacity(tcp_len);
    tcp.extend_from_slice(&sport.to_be_bytes());
    tcp.extend_from_slice(&t.dst_port.to_be_bytes());
    tcp.extend_from_slice(&seq.to_be_bytes());
    tcp.extend_from_slice(&ack.to_be_bytes());
    tcp.push((((20 + options.len()) / 4) as u8) << 4);
    tcp.push(flags);
    tcp.extend_from_slice(&64240u16.to_be_bytes()); // window
    tcp.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    tcp.extend_from_slice(options);
    tcp.extend_from_slice(payload);
    let c = tcp_checksum(src, t.dst_ip, &tcp);
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&tcp);
    f
}

/// `n` frames of the mix, for thread `thread` (its own sources and ports).
pub fn build_frames(t: &Target, n: usize, thread: usize) -> Vec<(Kind, Vec<u8>)> {
    let mut rng = Rng(0x5eed_0000 + thread as u64);
    (0..n)
        .map(|i| {
            let kind = t.mix[i % t.mix.len()];
            let g = (thread * n + i) as u32;
            let src = match kind {
                Kind::PeerSyn => t.peer_ip,
                _ => Ipv4Addr::from(u32::from(t.spoof_base) + g % t.spoof_count.max(1)),
            };
            // Spread the frames' ports so two frames of one source do not meet.
            let sport = PORT_MIN + ((g.wrapping_mul(7919)) % u32::from(u16::MAX - PORT_MIN)) as u16;
            let seq = rng.next() as u32;
            let f = match kind {
                Kind::Syn | Kind::PeerSyn => {
                    // MSS 1460, SACK permitted, timestamps, NOP, window scale 7.
                    let ts = (rng.next() as u32).to_be_bytes();
                    let opts = [
                        2, 4, 0x05, 0xb4, 4, 2, 8, 10, ts[0], ts[1], ts[2], ts[3], 0, 0, 0, 0, 1,
                        3, 3, 7,
                    ];
                    frame(t, src, sport, seq, 0, TCP_SYN, &opts, &[], g as u16)
                }
                Kind::Junk => {
                    let len = 32 + (rng.next() % 269) as usize;
                    let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                    let ack = rng.next() as u32;
                    frame(
                        t,
                        src,
                        sport,
                        seq,
                        ack,
                        TCP_ACK | TCP_PSH,
                        &[],
                        &payload,
                        g as u16,
                    )
                }
            };
            (kind, f)
        })
        .collect()
}

/// Moves a frame's source port on by one (wrapping within PORT_MIN..), fixing the TCP
/// checksum incrementally.
fn next_port(f: &mut [u8]) {
    let old = u16::from_be_bytes([f[TCP_SPORT], f[TCP_SPORT + 1]]);
    let new = if old == u16::MAX { PORT_MIN } else { old + 1 };
    f[TCP_SPORT..TCP_SPORT + 2].copy_from_slice(&new.to_be_bytes());
    let c = u16::from_be_bytes([f[TCP_CSUM], f[TCP_CSUM + 1]]);
    f[TCP_CSUM..TCP_CSUM + 2].copy_from_slice(&csum_replace(c, old, new).to_be_bytes());
}

/// What the generator did, per thread summed.
#[derive(Clone, Debug, Default)]
pub struct GenReport {
    pub sent: u64,
    pub by_kind: Vec<(&'static str, u64)>,
    /// `sendmmsg` calls that failed with ENOBUFS/EAGAIN (the socket or the veth was full).
    pub full: u64,
    pub elapsed_s: f64,
}

/// A running generator; stopped (and joined) by [`Generator::stop`] or on drop.
pub struct Generator {
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    tids: Vec<Arc<AtomicI64>>,
    threads: Vec<JoinHandle<Result<GenReport>>>,
}

impl Generator {
    /// Starts `threads` sender threads in network namespace `ns` on interface `ifname`,
    /// together paced at `pps` frames/s (0: as fast as they can), pinned to the CPUs of
    /// `cpus` (if given) at nice 19, so that what else runs there goes first.
    pub fn start(
        ns: &str,
        ifname: &str,
        t: &Target,
        pps: f64,
        threads: usize,
        cpus: Option<u64>,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        let mut tids = Vec::new();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        for th in 0..threads.max(1) {
            let netns = netlab::open(ns)?;
            let frames = build_frames(t, POOL, th);
            let (stop, paused, sent) = (stop.clone(), paused.clone(), sent.clone());
            let ready = ready_tx.clone();
            let tid = Arc::new(AtomicI64::new(0));
            tids.push(tid.clone());
            let ifname = ifname.to_owned();
            let rate = pps / threads.max(1) as f64;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("flood-{th}"))
                    .spawn(move || {
                        // SAFETY: gettid has no preconditions.
                        let me = unsafe { libc::syscall(libc::SYS_gettid) };
                        tid.store(me, Ordering::SeqCst);
                        let sock = cpus
                            .map_or(Ok(()), |m| super::net::pin(0, m))
                            .and_then(|()| {
                                // SAFETY: setpriority on this thread's own tid.
                                unsafe { libc::setpriority(libc::PRIO_PROCESS, me as u32, 19) };
                                open_socket(&netns, &ifname)
                            });
                        let sock = match sock {
                            Ok(s) => {
                                let _ = ready.send(Ok(()));
                                s
                            }
                            Err(e) => {
                                let _ = ready.send(Err(anyhow::anyhow!("{e:#}")));
                                return Err(e);
                            }
                        };
                        drop(ready);
                        send_loop(&sock, frames, rate, &stop, &paused, &sent)
                    })
                    .context("spawn flood thread")?,
            );
        }
        drop(ready_tx);
        let g = Generator {
            stop,
            paused,
            sent,
            tids,
            threads: handles,
        };
        for _ in 0..threads.max(1) {
            match ready_rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e.context("flood socket")),
                Err(_) => bail!("flood thread did not start"),
            }
        }
        Ok(g)
    }

    /// Pauses (true) or resumes (false) sending; the threads stay up.
    pub fn pause(&self, p: bool) {
        self.paused.store(p, Ordering::SeqCst);
    }

    /// Frames sent so far (all threads).
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// CPU seconds (utime + stime) of the sender threads so far.
    pub fn cpu_s(&self) -> f64 {
        self.tids
            .iter()
            .filter_map(|t| {
                let tid = t.load(Ordering::SeqCst);
                let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
                crate::bench::cpu::proc_stat_cpu_ticks(&s).ok()
            })
            .map(|t| t as f64 / crate::bench::cpu::clock_ticks_per_s())
            .sum()
    }

    /// Stops and joins the threads; what they did.
    pub fn stop(mut self) -> Result<GenReport> {
        self.join()
    }

    fn join(&mut self) -> Result<GenReport> {
        self.stop.store(true, Ordering::SeqCst);
        let mut total = GenReport::default();
        for h in self.threads.drain(..) {
            let r = h
                .join()
                .map_err(|_| anyhow::anyhow!("flood thread panicked"))??;
            total.sent += r.sent;
            total.full += r.full;
            total.elapsed_s = total.elapsed_s.max(r.elapsed_s);
            for (k, n) in r.by_kind {
                match total.by_kind.iter_mut().find(|(kk, _)| *kk == k) {
                    Some(e) => e.1 += n,
                    None => total.by_kind.push((k, n)),
                }
            }
        }
        Ok(total)
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

fn errno_ctx(what: &str) -> anyhow::Error {
    anyhow::anyhow!("{what}: {}", std::io::Error::last_os_error())
}

/// Enters `netns` (this thread only) and opens the sending socket on `ifname`.
fn open_socket(netns: &std::fs::File, ifname: &str) -> Result<OwnedFd> {
    // This thread only sends.
    netlab::enter(netns).context("setns")?;
    // SAFETY: plain socket(2); the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno_ctx("socket(AF_PACKET)"));
    }
    // SAFETY: fd is a new, valid descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(ifname)?;
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(errno_ctx(&format!("if_nametoindex({ifname})")));
    }
    let set_int = |level: libc::c_int, name: libc::c_int, value: libc::c_int| {
        // SAFETY: setsockopt with a pointer to a live int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&raw const value).cast(),
                size_of::<libc::c_int>() as u32,
            )
        };
    };
    set_int(libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1);
    set_int(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20);
    // SAFETY: zeroed sockaddr_ll is valid; the fields set below are the ones bind reads.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = 0; // receive nothing
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: bind with a sockaddr_ll of the right length.
    let r = unsafe {
        libc::bind(
            fd,
            (&raw const sll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if r != 0 {
        return Err(errno_ctx("bind(AF_PACKET)"));
    }
    Ok(sock)
}

fn send_loop(
    sock: &OwnedFd,
    frames: Vec<(Kind, Vec<u8>)>,
    pps: f64,
    stop: &AtomicBool,
    paused: &AtomicBool,
    sent_total: &AtomicU64,
) -> Result<GenReport> {
    let kinds: Vec<Kind> = frames.iter().map(|(k, _)| *k).collect();
    let mut bufs: Vec<Vec<u8>> = frames.into_iter().map(|(_, f)| f).collect();
    let n = bufs.len();
    let mut iov: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        })
        .collect();
    // SAFETY: an all-zero mmsghdr is valid (null name, no control data).
    let mut msgs: Vec<libc::mmsghdr> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    let mut per_kind = vec![0u64; n];
    let mut sent = 0u64;
    let mut full = 0u64;
    let mut idx = 0usize;
    let t0 = Instant::now();
    // Pacing restarts after every pause: frames sent since `pace_t0`.
    let (mut pace_t0, mut pace_sent) = (t0, 0u64);
    while !stop.load(Ordering::Relaxed) {
        if paused.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
            (pace_t0, pace_sent) = (Instant::now(), sent);
            continue;
        }
        if pps > 0.0 {
            let due = Duration::from_secs_f64((sent - pace_sent) as f64 / pps);
            let el = pace_t0.elapsed();
            if due > el {
                std::thread::sleep(due - el);
            }
        }
        let k = BATCH.min(n - idx);
        for b in &mut bufs[idx..idx + k] {
            next_port(b);
        }
        // SAFETY: msgs[idx..idx+k] point at live iovecs over live buffers (not resized
        // while the loop runs); sendmmsg copies the frames before it returns.
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr().add(idx),
                k as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENOBUFS | libc::EAGAIN) => {
                    full += 1;
                    std::thread::yield_now();
                    continue;
                }
                _ => bail!("sendmmsg: {e}"),
            }
        }
        let r = r as usize;
        for c in &mut per_kind[idx..idx + r] {
            *c += 1;
        }
        sent += r as u64;
        sent_total.fetch_add(r as u64, Ordering::Relaxed);
        idx = (idx + r) % n;
    }
    let mut by_kind: Vec<(&'static str, u64)> = Vec::new();
    for (k, c) in kinds.iter().zip(per_kind) {
        match by_kind.iter_mut().find(|(kk, _)| *kk == k.name()) {
            Some(e) => e.1 += c,
            None => by_kind.push((k.name(), c)),
        }
    }
    Ok(GenReport {
        sent,
        by_kind,
        full,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            src_mac: [2, 0, 0, 0xf1, 0, 1],
            dst_mac: [2, 0, 0, 0xf1, 0, 2],
            dst_ip: Ipv4Addr::new(198, 18, 1, 1),
            dst_port: 3868,
            spoof_base: Ipv4Addr::new(198, 18, 128, 0),
            spoof_count: 16384,
            peer_ip: Ipv4Addr::new(198, 18, 1, 3),
            mix: vec![Kind::Syn, Kind::Junk, Kind::PeerSyn],
        }
    }

    /// Verifies the IPv4 header and TCP checksums of a frame from scratch.
    fn checksums_ok(f: &[u8]) -> bool {
        let ip = &f[ETH_HLEN..ETH_HLEN + IP_HLEN];
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let seg = &f[ETH_HLEN + IP_HLEN..];
        // A correct checksum makes the sum over the data (checksum included) fold to 0.
        let mut s = sum16(0, &src.octets());
        s = sum16(s, &dst.octets());
        s += 6 + seg.len() as u32;
        fold(sum16(0, ip)) == 0 && fold(sum16(s, seg)) == 0
    }

    #[test]
    fn frames_carry_valid_checksums_before_and_after_the_port_moves_on() {
        let t = target();
        let frames = build_frames(&t, 30, 0);
        for (kind, mut f) in frames {
            assert!(checksums_ok(&f), "{kind:?}");
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            let ip_len = u16::from_be_bytes([f[16], f[17]]) as usize;
            assert_eq!(ip_len + ETH_HLEN, f.len());
            let flags = f[TCP_SPORT + 13];
            let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
            match kind {
                Kind::Syn => {
                    assert_eq!(flags, TCP_SYN);
                    assert!(src.octets()[2] >= 128, "{src} is no spoofed source");
                }
                Kind::PeerSyn => {
                    assert_eq!(flags, TCP_SYN);
                    assert_eq!(src, t.peer_ip);
                }
                Kind::Junk => {
                    assert_eq!(flags, TCP_ACK | TCP_PSH);
                    assert!(f.len() >= ETH_HLEN + IP_HLEN + 20 + 32);
                }
            }
            let p0 = u16::from_be_bytes([f[TCP_SPORT], f[TCP_SPORT + 1]]);
            for _ in 0..3 {
                next_port(&mut f);
                assert!(checksums_ok(&f), "{kind:?} after next_port");
            }
            let p1 = u16::from_be_bytes([f[TCP_SPORT], f[TCP_SPORT + 1]]);
            assert_eq!(p1, if p0 > u16::MAX - 3 { p1 } else { p0 + 3 });
        }
        // Wrap-around stays valid.
        let mut f = build_frames(&t, 1, 0).remove(0).1;
        let old = u16::from_be_bytes([f[TCP_SPORT], f[TCP_SPORT + 1]]);
        f[TCP_SPORT..TCP_SPORT + 2].copy_from_slice(&u16::MAX.to_be_bytes());
        let c = u16::from_be_bytes([f[TCP_CSUM], f[TCP_CSUM + 1]]);
        f[TCP_CSUM..TCP_CSUM + 2].copy_from_slice(&csum_replace(c, old, u16::MAX).to_be_bytes());
        assert!(checksums_ok(&f));
        next_port(&mut f);
        assert_eq!(
            u16::from_be_bytes([f[TCP_SPORT], f[TCP_SPORT + 1]]),
            PORT_MIN
        );
        assert!(checksums_ok(&f));
    }

    #[test]
    fn checksum_matches_a_known_segment() {
        // RFC 1071 example words: 0001 f203 f4f5 f6f7 → sum ddf2, checksum 220d.
        assert_eq!(
            fold(sum16(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0x220d
        );
    }
}
