//! Test support: writes a classic pcap of one TCP connection carrying Diameter, so
//! `tshark` (or Wireshark) can check our encoding. Ethernet + IPv4 + TCP with correct
//! lengths, sequence numbers and checksums, a three-way handshake first, deterministic
//! timestamps (1 ms apart; no clock is read). Nothing is sent anywhere.

use std::io;
use std::net::SocketAddrV4;
use std::path::Path;

const LINKTYPE_ETHERNET: u32 = 1;
const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
const TCP_LEN: usize = 20;
/// Largest payload of one IPv4 packet with these headers.
const MAX_SEGMENT: usize = u16::MAX as usize - IPV4_LEN - TCP_LEN;
/// Start of the synthetic clock: 2023-11-14T22:13:20Z.
const EPOCH_SECS: u64 = 1_700_000_000;

const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;

/// Builds a pcap file of one client↔server TCP connection in memory.
#[derive(Debug)]
pub struct PcapWriter {
    out: Vec<u8>,
    client: SocketAddrV4,
    server: SocketAddrV4,
    client_seq: u32,
    server_seq: u32,
    packets: u64,
}

impl PcapWriter {
    /// Starts the file and the connection (SYN, SYN-ACK, ACK).
    pub fn new(client: SocketAddrV4, server: SocketAddrV4) -> PcapWriter {
        let mut out = Vec::new();
        // Classic pcap global header, microsecond timestamps, native (little) endian.
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        out.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        out.extend_from_slice(&65_535u32.to_le_bytes()); // snaplen
        out.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        let mut w = PcapWriter {
            out,
            client,
            server,
            client_seq: 1_000,
            server_seq: 500_000,
            packets: 0,
        };
        w.segment(true, TCP_SYN, &[]);
        w.client_seq = w.client_seq.wrapping_add(1);
        w.segment(false, TCP_SYN | TCP_ACK, &[]);
        w.server_seq = w.server_seq.wrapping_add(1);
        w.segment(true, TCP_ACK, &[]);
        w
    }

    /// Bytes sent by the client (e.g. one or more encoded requests).
    pub fn client_to_server(&mut self, payload: &[u8]) {
        self.data(true, payload);
    }

    /// Bytes sent by the server (e.g. encoded answers).
    pub fn server_to_client(&mut self, payload: &[u8]) {
        self.data(false, payload);
    }

    /// Number of packets written so far (handshake included).
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Ends the connection (FIN both ways) and returns the file contents.
    pub fn finish(mut self) -> Vec<u8> {
        self.segment(true, TCP_FIN | TCP_ACK, &[]);
        self.client_seq = self.client_seq.wrapping_add(1);
        self.segment(false, TCP_FIN | TCP_ACK, &[]);
        self.server_seq = self.server_seq.wrapping_add(1);
        self.segment(true, TCP_ACK, &[]);
        self.out
    }

    /// Ends the connection and writes the file.
    pub fn write_to(self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.finish())
    }

    fn data(&mut self, from_client: bool, payload: &[u8]) {
        for chunk in payload.chunks(MAX_SEGMENT) {
            self.segment(from_client, TCP_PSH | TCP_ACK, chunk);
            let seq = if from_client {
                &mut self.client_seq
            } else {
                &mut self.server_seq
            };
            *seq = seq.wrapping_add(chunk.len() as u32);
        }
    }

    fn segment(&mut self, from_client: bool, tcp_flags: u8, payload: &[u8]) {
        let (src, dst, seq, ack) = if from_client {
            (self.client, self.server, self.client_seq, self.server_seq)
        } else {
            (self.server, self.client, self.server_seq, self.client_seq)
        };
        let ack = if tcp_flags & TCP_ACK != 0 { ack } else { 0 };
        let ip_total = IPV4_LEN + TCP_LEN + payload.len();
        let mut pkt = Vec::with_capacity(ETH_LEN + ip_total);
        // Ethernet: locally administered MACs, IPv4.
        let (smac, dmac) = if from_client {
            ([0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2])
        } else {
            ([0x02, 0, 0, 0, 0, 2], [0x02, 0, 0, 0, 0, 1])
        };
        pkt.extend_from_slice(&dmac);
        pkt.extend_from_slice(&smac);
        pkt.extend_from_slice(&0x0800u16.to_be_bytes());
        // IPv4 header.
        let ip_start = pkt.len();
        pkt.push(0x45);
        pkt.push(0);
        pkt.extend_from_slice(&(ip_total as u16).to_be_bytes());
        pkt.extend_from_slice(&(self.packets as u16).to_be_bytes()); // identification
        pkt.extend_from_slice(&0x4000u16.to_be_bytes()); // DF
        pkt.push(64); // TTL
        pkt.push(6); // TCP
        pkt.extend_from_slice(&[0, 0]); // checksum, filled below
        pkt.extend_from_slice(&src.ip().octets());
        pkt.extend_from_slice(&dst.ip().octets());
        let csum = checksum(&pkt[ip_start..ip_start + IPV4_LEN], 0);
        pkt[ip_start + 10..ip_start + 12].copy_from_slice(&csum.to_be_bytes());
        // TCP header.
        let tcp_start = pkt.len();
        pkt.extend_from_slice(&src.port().to_be_bytes());
        pkt.extend_from_slice(&dst.port().to_be_bytes());
        pkt.extend_from_slice(&seq.to_be_bytes());
        pkt.extend_from_slice(&ack.to_be_bytes());
        pkt.push(((TCP_LEN / 4) as u8) << 4);
        pkt.push(tcp_flags);
        pkt.extend_from_slice(&65_535u16.to_be_bytes()); // window
        pkt.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
        pkt.extend_from_slice(payload);
        // TCP checksum over the pseudo-header (RFC 793 §3.1).
        let tcp_len = (TCP_LEN + payload.len()) as u32;
        let mut pseudo = sum_words(&src.ip().octets()) + sum_words(&dst.ip().octets());
        pseudo += 6 + tcp_len;
        let csum = checksum(&pkt[tcp_start..], pseudo);
        pkt[tcp_start + 16..tcp_start + 18].copy_from_slice(&csum.to_be_bytes());
        // Record header.
        let micros = self.packets * 1_000;
        let ts_sec = (EPOCH_SECS + micros / 1_000_000) as u32;
        let ts_usec = (micros % 1_000_000) as u32;
        self.out.extend_from_slice(&ts_sec.to_le_bytes());
        self.out.extend_from_slice(&ts_usec.to_le_bytes());
        self.out
            .extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        self.out
            .extend_from_slice(&(pkt.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&pkt);
        self.packets += 1;
    }
}

fn sum_words(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

/// Internet checksum (RFC 1071) of `b` plus an initial sum.
fn checksum(b: &[u8], initial: u32) -> u16 {
    let mut sum = u64::from(initial) + u64::from(sum_words(b));
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether `tshark` can be run (the project's setup installs it).
pub fn tshark_available() -> bool {
    std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// tshark's verbose decode of a pcap, with Diameter on TCP 3868 and IP/TCP checksum
/// validation (so a broken pcap writer shows up too). For wire-format tests.
pub fn tshark_verbose(path: &std::path::Path) -> std::io::Result<String> {
    let out = std::process::Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(path)
        .arg("-V")
        // Diameter's TCP port preference in Wireshark 4.x (3868 is also the default).
        .args(["-o", "diameter.tcp.port:3868"])
        .args(["-o", "tcp.check_checksum:TRUE"])
        .args(["-o", "ip.check_checksum:TRUE"])
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first problem tshark reports in a decode (malformed packet, expert error or
/// warning), with the frame it is in; None if the decode is clean.
pub fn tshark_problem(decoded: &str) -> Option<String> {
    for bad in [
        "Malformed",
        "Expert Info (Error",
        "[Malformed",
        "Expert Info (Warning",
    ] {
        if let Some(pos) = decoded.find(bad) {
            let from = decoded[..pos].rfind("Frame ").unwrap_or(0);
            return Some(format!(
                "tshark reports {bad:?}:\n{}",
                &decoded[from..(pos + 400).min(decoded.len())]
            ));
        }
    }
    None
}

/// Writes `exchange` ((from_client, encoded message) in order) as one TCP connection
/// into a temporary pcap, decodes it with [`tshark_verbose`] and removes the file
/// (kept when `DRA_KEEP_PCAP` is set). `tag` names the file.
pub fn tshark_decode_exchange(tag: &str, exchange: &[(bool, Vec<u8>)]) -> std::io::Result<String> {
    let mut w = PcapWriter::new(
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(198, 18, 0, 1), 40_001),
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::new(198, 18, 0, 2), 3868),
    );
    for (from_client, bytes) in exchange {
        if *from_client {
            w.client_to_server(bytes);
        } else {
            w.server_to_client(bytes);
        }
    }
    let path = std::env::temp_dir().join(format!("dra-{tag}-{}.pcap", std::process::id()));
    w.write_to(&path)?;
    let out = tshark_verbose(&path);
    if std::env::var_os("DRA_KEEP_PCAP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
    out
}
