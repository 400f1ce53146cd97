//! Crafted packets for fixture tests: Ethernet (+ VLAN tags), IPv4 (+ options) or
//! IPv6 (+ extension headers), TCP (+ options) or SCTP, with correct checksums
//! (TCP: full ones' complement sum; SCTP: CRC32c is left zero — the fast path never
//! checks it). Addresses only from 198.18.0.0/15 and 2001:db8::/32.

use std::net::IpAddr;

use dra::diameter::{Avp, Message};
use dra_common::wire::{app, avp, cmd, flags};

pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const DRA_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// Ones' complement sum folded to 16 bits.
pub fn csum_fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn sum_bytes(b: &[u8]) -> u32 {
    let mut s = 0u32;
    for ch in b.chunks(2) {
        let w = if ch.len() == 2 {
            u16::from_be_bytes([ch[0], ch[1]])
        } else {
            u16::from_be_bytes([ch[0], 0])
        };
        s += w as u32;
    }
    s
}

/// The L4 checksum over a pseudo header and `seg` (with its checksum field zeroed).
pub fn l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, seg: &[u8]) -> u16 {
    let mut s = 0u32;
    match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            s += sum_bytes(&a.octets());
            s += sum_bytes(&b.octets());
            s += proto as u32;
            s += seg.len() as u32;
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            s += sum_bytes(&a.octets());
            s += sum_bytes(&b.octets());
            s += (seg.len() as u32 >> 16) + (seg.len() as u32 & 0xffff);
            s += proto as u32;
        }
        _ => panic!("mixed address families"),
    }
    s += sum_bytes(seg);
    !csum_fold(s)
}

/// What to put around a TCP/SCTP segment.
#[derive(Clone, Debug)]
pub struct Frame {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub vlans: Vec<u16>,
    /// Extra IPv4 option bytes (multiple of 4).
    pub ip_options: Vec<u8>,
    /// IPv6 extension headers to insert, by next-header code (0, 43, 60, 44).
    pub ext_headers: Vec<u8>,
    /// IPv4 "more fragments".
    pub more_fragments: bool,
}

impl Frame {
    pub fn v4(src: &str, dst: &str) -> Frame {
        Frame {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            vlans: vec![],
            ip_options: vec![],
            ext_headers: vec![],
            more_fragments: false,
        }
    }

    /// Wraps an L4 segment (checksum already filled) in IP and Ethernet.
    pub fn wrap(&self, proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&DRA_MAC);
        p.extend_from_slice(&CLIENT_MAC);
        let ethertype: u16 = if self.src.is_ipv4() { 0x0800 } else { 0x86dd };
        for (i, v) in self.vlans.iter().enumerate() {
            let tpid: u16 = if i == 0 && self.vlans.len() == 2 {
                0x88a8
            } else {
                0x8100
            };
            p.extend_from_slice(&tpid.to_be_bytes());
            p.extend_from_slice(&v.to_be_bytes());
        }
        p.extend_from_slice(&ethertype.to_be_bytes());
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let ihl = 5 + self.ip_options.len() / 4;
                let total = ihl * 4 + l4.len();
                let mut h = vec![0u8; 20];
                h[0] = 0x40 | ihl as u8;
                h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                h[6] = if self.more_fragments { 0x20 } else { 0x40 };
                h[8] = 64;
                h[9] = proto;
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                h.extend_from_slice(&self.ip_options);
                let c = !csum_fold(sum_bytes(&h));
                h[10..12].copy_from_slice(&c.to_be_bytes());
                p.extend_from_slice(&h);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut ext = Vec::new();
                let mut next_hdrs: Vec<u8> = self.ext_headers.clone();
                next_hdrs.push(proto);
                for (i, code) in self.ext_headers.iter().enumerate() {
                    let nh = next_hdrs[i + 1];
                    if *code == 44 {
                        // Fragment header: 8 bytes, offset 0, M=1.
                        ext.extend_from_slice(&[nh, 0, 0, 1, 0, 0, 0, 7]);
                    } else {
                        // Options with PadN: 8 bytes.
                        ext.extend_from_slice(&[nh, 0, 1, 4, 0, 0, 0, 0]);
                    }
                }
                let first = if self.ext_headers.is_empty() {
                    proto
                } else {
                    self.ext_headers[0]
                };
                let mut h = vec![0u8; 40];
                h[0] = 0x60;
                h[4..6].copy_from_slice(&((ext.len() + l4.len()) as u16).to_be_bytes());
                h[6] = first;
                h[7] = 64;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                p.extend_from_slice(&h);
                p.extend_from_slice(&ext);
            }
            _ => panic!("mixed families"),
        }
        p.extend_from_slice(l4);
        p
    }

    /// A TCP segment with payload, correct checksum.
    pub fn tcp(
        &self,
        sport: u16,
        dport: u16,
        seq: u32,
        tflags: u8,
        options: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        let doff = 5 + options.len() / 4;
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&1u32.to_be_bytes());
        t[12] = (doff as u8) << 4;
        t[13] = tflags;
        t[14..16].copy_from_slice(&65535u16.to_be_bytes());
        t.extend_from_slice(options);
        t.extend_from_slice(payload);
        let c = l4_checksum(self.src, self.dst, 6, &t);
        t[16..18].copy_from_slice(&c.to_be_bytes());
        self.wrap(6, &t)
    }

    /// An SCTP packet with the given chunks (each already padded).
    pub fn sctp(&self, sport: u16, dport: u16, chunks: &[Vec<u8>]) -> Vec<u8> {
        let mut s = vec![0u8; 12];
        s[0..2].copy_from_slice(&sport.to_be_bytes());
        s[2..4].copy_from_slice(&dport.to_be_bytes());
        s[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        for c in chunks {
            s.extend_from_slice(c);
        }
        self.wrap(132, &s)
    }
}

pub const TCP_SYN: u8 = 0x02;
pub const TCP_ACK: u8 = 0x10;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_RST: u8 = 0x04;

/// SCTP DATA chunk (RFC 9260 §3.3.1), B|E flags, PPID 46.
pub fn sctp_data(tsn: u32, ppid: u32, data: &[u8]) -> Vec<u8> {
    sctp_data_frag(tsn, SCTP_B | SCTP_E, ppid, data)
}

/// DATA/I-DATA chunk flags: first fragment of a message.
pub const SCTP_B: u8 = 0x02;
/// DATA/I-DATA chunk flags: last fragment of a message.
pub const SCTP_E: u8 = 0x01;

/// One fragment of a message as an SCTP DATA chunk (`flags`: B, E or neither), stream 1.
pub fn sctp_data_frag(tsn: u32, flags: u8, ppid: u32, data: &[u8]) -> Vec<u8> {
    let len = 16 + data.len();
    let mut c = vec![0u8, flags];
    c.extend_from_slice(&(len as u16).to_be_bytes());
    c.extend_from_slice(&tsn.to_be_bytes());
    c.extend_from_slice(&[0, 1, 0, 0]);
    c.extend_from_slice(&ppid.to_be_bytes());
    c.extend_from_slice(data);
    while c.len() % 4 != 0 {
        c.push(0);
    }
    c
}

/// SCTP I-DATA chunk (RFC 8260 §2.1), B|E flags, MID 7.
pub fn sctp_idata(tsn: u32, ppid: u32, data: &[u8]) -> Vec<u8> {
    sctp_idata_frag(tsn, SCTP_B | SCTP_E, 1, 7, ppid, data)
}

/// One fragment of a message as an SCTP I-DATA chunk: `stream`, `mid`, and the PPID
/// (first fragment, B) or the Fragment Sequence Number (the others).
pub fn sctp_idata_frag(
    tsn: u32,
    flags: u8,
    stream: u16,
    mid: u32,
    ppid_or_fsn: u32,
    data: &[u8],
) -> Vec<u8> {
    let len = 20 + data.len();
    let mut c = vec![64u8, flags];
    c.extend_from_slice(&(len as u16).to_be_bytes());
    c.extend_from_slice(&tsn.to_be_bytes());
    c.extend_from_slice(&stream.to_be_bytes());
    c.extend_from_slice(&[0, 0]);
    c.extend_from_slice(&mid.to_be_bytes());
    c.extend_from_slice(&ppid_or_fsn.to_be_bytes());
    c.extend_from_slice(data);
    while c.len() % 4 != 0 {
        c.push(0);
    }
    c
}

/// SCTP SACK chunk.
pub fn sctp_sack(cum_tsn: u32) -> Vec<u8> {
    let mut c = vec![3u8, 0, 0, 16];
    c.extend_from_slice(&cum_tsn.to_be_bytes());
    c.extend_from_slice(&65536u32.to_be_bytes());
    c.extend_from_slice(&[0, 0, 0, 0]);
    c
}

/// SCTP INIT chunk.
pub fn sctp_init() -> Vec<u8> {
    let mut c = vec![1u8, 0, 0, 20];
    c.extend_from_slice(&1u32.to_be_bytes());
    c.extend_from_slice(&65536u32.to_be_bytes());
    c.extend_from_slice(&[0, 1, 0, 1]);
    c.extend_from_slice(&1u32.to_be_bytes());
    c
}

/// A Gx/Gy CCR with the given CC-Request-Type.
pub fn ccr(app_id: u32, req_type: u32, n: u32) -> Vec<u8> {
    Message::request(cmd::CREDIT_CONTROL, app_id, 0x100 + n, 0x200 + n)
        .proxiable()
        .with(Avp::utf8(avp::SESSION_ID, &format!("pgw1.lab.example;1;{n}")).mandatory())
        .with(Avp::u32(avp::AUTH_APPLICATION_ID, app_id).mandatory())
        .with(Avp::utf8(avp::ORIGIN_HOST, "pgw1.lab.example").mandatory())
        .with(Avp::utf8(avp::ORIGIN_REALM, "lab.example").mandatory())
        .with(Avp::utf8(avp::DESTINATION_REALM, "pcrf.lab.example").mandatory())
        .with(Avp::enumerated(avp::CC_REQUEST_TYPE, req_type as i32).mandatory())
        .with(Avp::u32(avp::CC_REQUEST_NUMBER, n).mandatory())
        .encode()
}

/// A CCR as a real gateway writes it, with 3GPP names (TS 23.003 §19.4.2.4): its
/// CC-Request-Type starts more than 192 bytes into the message.
pub fn ccr_3gpp(app_id: u32, req_type: u32, n: u32) -> Vec<u8> {
    let host = "pgw01.epc.mnc010.mcc440.3gppnetwork.org";
    let realm = "epc.mnc010.mcc440.3gppnetwork.org";
    let mut m = Message::request(cmd::CREDIT_CONTROL, app_id, 0x100 + n, 0x200 + n)
        .proxiable()
        .with(Avp::utf8(avp::SESSION_ID, &format!("{host};1594720193;{n};9abcdef0")).mandatory())
        .with(Avp::u32(avp::AUTH_APPLICATION_ID, app_id).mandatory())
        .with(Avp::utf8(avp::ORIGIN_HOST, host).mandatory())
        .with(Avp::utf8(avp::ORIGIN_REALM, realm).mandatory())
        .with(Avp::utf8(avp::DESTINATION_REALM, "pcrf.mnc010.mcc440.3gppnetwork.org").mandatory());
    if app_id == app::GY {
        // Service-Context-Id (RFC 4006 §8.42) precedes CC-Request-Type.
        m = m.with(Avp::utf8(461, "32251@3gpp.org").mandatory());
    }
    m.with(Avp::enumerated(avp::CC_REQUEST_TYPE, req_type as i32).mandatory())
        .with(Avp::u32(avp::CC_REQUEST_NUMBER, n).mandatory())
        .encode()
}

/// A CCR builder: (application, CC-Request-Type, n) → message with Hop-by-Hop
/// 0x100 + n and End-to-End 0x200 + n.
pub type CcrBuild = fn(u32, u32, u32) -> Vec<u8>;

/// The CCR builders the straddling sweeps use: short names (CC-Request-Type ~130 bytes
/// in) and 3GPP names (beyond 192 bytes).
pub const CCR_BUILDS: [(&str, CcrBuild); 2] = [("short names", ccr), ("3GPP names", ccr_3gpp)];

/// Offset of the first top-level AVP with `code` in an encoded message.
pub fn avp_offset(msg: &[u8], code: u32) -> Option<usize> {
    let mut off = 20;
    while off + 8 <= msg.len() {
        let c = u32::from_be_bytes(msg[off..off + 4].try_into().ok()?);
        let len = u32::from_be_bytes([0, msg[off + 5], msg[off + 6], msg[off + 7]]) as usize;
        if c == code {
            return Some(off);
        }
        if len < 8 {
            return None;
        }
        off += (len + 3) & !3;
    }
    None
}

/// A CCR whose CC-Request-Type comes after `fillers` other AVPs.
pub fn ccr_deep(app_id: u32, req_type: u32, fillers: usize) -> Vec<u8> {
    let mut m = Message::request(cmd::CREDIT_CONTROL, app_id, 7, 7)
        .with(Avp::utf8(avp::SESSION_ID, "pgw1.lab.example;9;9"));
    for i in 0..fillers {
        m = m.with(Avp::utf8(2000 + i as u32, "x"));
    }
    m.with(Avp::enumerated(avp::CC_REQUEST_TYPE, req_type as i32))
        .encode()
}

/// The answer to a CCR.
pub fn cca(app_id: u32, n: u32) -> Vec<u8> {
    Message::answer(cmd::CREDIT_CONTROL, app_id, 0x100 + n, 0x200 + n)
        .with(Avp::utf8(
            avp::SESSION_ID,
            &format!("pgw1.lab.example;1;{n}"),
        ))
        .with(Avp::u32(avp::RESULT_CODE, 2001))
        .encode()
}

/// A DWR.
pub fn dwr() -> Vec<u8> {
    Message::request(cmd::DEVICE_WATCHDOG, app::COMMON, 9, 9)
        .with(Avp::utf8(avp::ORIGIN_HOST, "pgw1.lab.example"))
        .with(Avp::utf8(avp::ORIGIN_REALM, "lab.example"))
        .encode()
}

/// Byte offset of the TCP header in a frame built by [`Frame::tcp`].
pub fn tcp_offset(pkt: &[u8]) -> usize {
    let mut off = 12;
    loop {
        let et = u16::from_be_bytes([pkt[off], pkt[off + 1]]);
        if et == 0x8100 || et == 0x88a8 {
            off += 4;
            continue;
        }
        off += 2;
        return if et == 0x0800 {
            off + ((pkt[off] & 0x0f) as usize) * 4
        } else {
            off + 40
        };
    }
}

/// The frame with the Diameter flags bytes at payload offsets `flag_offs` marked, and the
/// TCP checksum recomputed from scratch (an independent check of the kernel's
/// incremental update). IPv4 without options only.
pub fn expect_marked(pkt: &[u8], frame: &Frame, flag_offs: &[usize]) -> Vec<u8> {
    let mut out = pkt.to_vec();
    let t = tcp_offset(pkt);
    let doff = ((pkt[t + 12] >> 4) as usize) * 4;
    for m in flag_offs {
        out[t + doff + m] |= flags::RATE_LIMIT_MARK;
    }
    out[t + 16] = 0;
    out[t + 17] = 0;
    let c = l4_checksum(frame.src, frame.dst, 6, &out[t..]);
    out[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
    out
}

/// `pkt` (a TCP frame built by [`Frame::tcp`]) with the 2 payload bytes at payload
/// offset `at` chosen so that its TCP checksum field is 0x0000 (a sum of −0 in ones'
/// complement: the case RFC 1624 §3 is about), checksum valid.
pub fn with_zero_checksum(pkt: &[u8], frame: &Frame, at: usize) -> Vec<u8> {
    let t = tcp_offset(pkt);
    let doff = ((pkt[t + 12] >> 4) as usize) * 4;
    let p = t + doff + at;
    for v in 0..=u16::MAX {
        let mut out = pkt.to_vec();
        out[p..p + 2].copy_from_slice(&v.to_be_bytes());
        out[t + 16] = 0;
        out[t + 17] = 0;
        if l4_checksum(frame.src, frame.dst, 6, &out[t..]) == 0 {
            return out;
        }
    }
    panic!("no value gives a zero checksum");
}

/// Verifies the TCP checksum of a frame.
pub fn tcp_checksum_ok(pkt: &[u8], frame: &Frame) -> bool {
    let t = tcp_offset(pkt);
    let mut seg = pkt[t..].to_vec();
    let want = u16::from_be_bytes([seg[16], seg[17]]);
    seg[16] = 0;
    seg[17] = 0;
    l4_checksum(frame.src, frame.dst, 6, &seg) == want
}
