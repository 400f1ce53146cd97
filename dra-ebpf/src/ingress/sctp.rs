//! SCTP (RFC 9260): walk the bundled chunks of a packet, one per `bpf_loop` iteration.
//! DATA (0) and I-DATA (64, RFC 8260) chunks with the B flag and PPID 46 (or 0 on a
//! Diameter port) start a Diameter message, which is classified and charged. Every
//! TSN is charged at most once: per association we keep the next TSN expected; a
//! chunk below it is a retransmission; one above it is past a hole and the packet is
//! dropped (bounded, then the association resynchronises), as for TCP.
//!
//! An association is known by its verification tag and ports, not by addresses: a
//! multihomed peer sends over several paths (source and destination addresses), and
//! one TSN sequence runs over all of them — its retransmissions, typically, over
//! another path than the original. The peer itself is still recognised by the
//! packet's source address.
//!
//! A message may be fragmented over several DATA chunks (B on the first, E on the
//! last), in one packet or several. Its class is found by the same
//! [`ScanCursor`](dra_common::wire::ScanCursor) as on TCP: if the first fragment ends
//! before CC-Request-Type, the association keeps the scan and the next fragment
//! continues it — the DATA fragments of one message have consecutive TSNs (RFC 9260
//! §6.9); I-DATA fragments carry the message's stream and MID. The request is decided
//! in the packet that completes its class, so its verdict does not depend on the
//! fragmentation. One message per association can be in progress: an I-DATA message
//! fragmented while another is (interleaving, RFC 8260) is decided on what its first
//! fragment shows (counted `over_bound`).
//!
//! * `reject`: the over-limit request is marked out of band, always — marking its
//!   header would need the packet's CRC32c recomputed: an
//!   [`OobMark`] (association as this packet names it, Hop-by-Hop, End-to-End) goes
//!   into the `OOB_MARKS` ring before the packet passes, and the agent, which reads
//!   the ring before it reads the request from its socket, answers it 3002 as on TCP.
//!   If the ring is full the packet is dropped instead (counted `oob_full`) and the
//!   chunk's retransmission judged again.
//! * `drop`: the packet is dropped; the chunks before the dropped one stay charged
//!   (the association is committed up to its TSN), so the retransmission is not
//!   charged twice.
//!
//! INIT is the connection guard's SYN: over its limit it is dropped.

use aya_ebpf::{
    bindings::xdp_md,
    helpers::{bpf_ktime_get_ns, bpf_xdp_load_bytes},
    programs::XdpContext,
};
use dra_common::{
    maps::{FlowKey, OobMark, PeerInfo, SctpAssoc},
    stats::Counter,
    wire::{Progress, SCTP_PPID_DIAMETER, ScanCursor},
    words,
};

use crate::{
    admit::{Verdict, class_slot, decide, publish},
    bucket::{self, Charge},
    bytes::XdpSource,
    ingress::xdp::{DROP, PASS},
    maps::{CLASS_SLOTS, OOB_MARKS, SCTP_ASSOCS, SCTP_WALK, count},
    overload,
    walk::{self, Steps},
};

/// `bpf_loop` iterations per packet: one per chunk looked at or scan item read.
const MAX_STEPS: u32 = 1024;
const SCTP_COMMON_HLEN: u32 = 12;
const CHUNK_DATA: u8 = 0;
const CHUNK_INIT: u8 = 1;
const CHUNK_IDATA: u8 = 64;
const FLAG_E: u8 = 0x01;
const FLAG_B: u8 = 0x02;
const MAX_OFO_DROPS: u32 = 64;

#[inline(always)]
fn tsn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Walk status: go on, stop and pass, stop and drop.
const RUNNING: u32 = 0;
const STOP_PASS: u32 = 1;
const STOP_DROP: u32 = 2;

/// The walk over one packet: in a per-CPU map value ([`SCTP_WALK`]), not on the stack
/// (verifier workaround, as ingress/tcp.rs `Walk`); pointers go on the stack ([`WalkRef`]).
#[repr(C)]
pub struct Walk {
    peer: PeerInfo,
    now: u64,
    /// Packet offset of the next chunk.
    off: u32,
    status: u32,
    /// 1 while the Diameter bytes of a DATA chunk are being scanned (`cur`).
    scanning: u32,
    /// Of the chunk being scanned: packet offset of its data, message offsets of its
    /// first byte and one past its last, flags, stream and MID.
    data_at: u32,
    start: u32,
    end: u32,
    flags: u32,
    stream: u32,
    mid: u32,
    /// 1: the chunk's message may be kept in the association if its class is still
    /// unknown at the chunk's end.
    keep: u32,
    /// The association as it will be once this chunk is accepted.
    next: SctpAssoc,
    /// The association's key (see [`WalkRef::akey`]).
    akey: FlowKey,
    cur: ScanCursor,
}

/// The `bpf_loop` callback's context (on the stack): pointers only.
#[repr(C)]
struct WalkRef {
    ctx: *mut xdp_md,
    /// The packet's flow (its path: addresses and ports), for out-of-band marks and
    /// events.
    key: *const FlowKey,
    /// The association's key in [`SCTP_ASSOCS`] (in the walk: verification tag and
    /// ports, no addresses).
    akey: *const FlowKey,
    /// The association (null until the first DATA chunk when there is none).
    assoc: *mut SctpAssoc,
    w: *mut Walk,
}

pub fn process(ctx: &XdpContext, sctp_off: usize, key: &FlowKey, peer: &PeerInfo) -> u32 {
    let Some(wp) = SCTP_WALK.get_ptr_mut(0) else {
        return PASS;
    };
    // SAFETY: this CPU's scratch value; XDP runs to completion.
    let w = unsafe { &mut *wp };
    w.peer = *peer;
    // SAFETY: helper without arguments.
    w.now = unsafe { bpf_ktime_get_ns() };
    w.off = sctp_off as u32 + SCTP_COMMON_HLEN;
    w.status = RUNNING;
    w.scanning = 0;
    let Some(vtag) = load4(ctx.ctx, sctp_off as u32 + 4) else {
        return PASS;
    };
    w.akey.saddr = [u32::from_ne_bytes(vtag), 0, 0, 0];
    w.akey.daddr = [0; 4];
    w.akey.sport = key.sport;
    w.akey.dport = key.dport;
    w.akey.proto = key.proto;
    w.akey._pad = [0; 3];
    let akey = &w.akey;
    let mut r = WalkRef {
        ctx: ctx.ctx,
        key: key as *const FlowKey,
        akey: akey as *const FlowKey,
        assoc: match SCTP_ASSOCS.get_ptr_mut(akey) {
            Some(a) => a,
            None => core::ptr::null_mut(),
        },
        w: wp,
    };
    walk::run(MAX_STEPS, &mut r);
    // The callback wrote through `r.w`: read the walk afresh.
    // SAFETY: this CPU's scratch value, as above.
    let w = unsafe { &*wp };
    match w.status {
        STOP_DROP => DROP,
        STOP_PASS => PASS,
        _ => {
            if w.scanning != 0 || (w.off as usize) < ctx.data_end() - ctx.data() {
                // More than one walk may take: resynchronise. (By reference: the key
                // is not copied onto the stack.)
                #[allow(clippy::needless_borrows_for_generic_args)]
                let _ = SCTP_ASSOCS.remove(&w.akey);
                count(Counter::Resync);
                crate::events::flow(ctx, crate::events::Event::WalkBound, key);
            }
            PASS
        }
    }
}

const fn empty_assoc(tsn: u32) -> SctpAssoc {
    SctpAssoc {
        next_tsn: tsn,
        ofo_drops: 0,
        in_progress: 0,
        msg_off: 0,
        stream: 0,
        mid: 0,
        cursor: ScanCursor::new(),
    }
}

impl Steps for WalkRef {
    #[inline(always)]
    fn step(&mut self) -> bool {
        // SAFETY: the walk is this CPU's scratch value, valid for this program run.
        let w = unsafe { &mut *self.w };
        if w.scanning != 0 {
            scan_step(self, w)
        } else {
            chunk(self, w)
        }
    }
}

#[inline(always)]
fn load4(ctx: *mut xdp_md, off: u32) -> Option<[u8; 4]> {
    let mut b = [0u8; 4];
    // SAFETY: 4 bytes into a stack buffer; the helper checks the packet's bounds.
    let r = unsafe { bpf_xdp_load_bytes(ctx, off, b.as_mut_ptr() as *mut _, 4) };
    if r == 0 { Some(b) } else { None }
}

/// The next chunk: INIT (connection guard), DATA/I-DATA (TSN, then the Diameter
/// bytes), others skipped. Returns true to go on.
#[inline(always)]
fn chunk(r: &mut WalkRef, w: &mut Walk) -> bool {
    let Some(ch) = load4(r.ctx, w.off) else {
        return false;
    };
    let ctype = ch[0];
    let cflags = ch[1];
    let clen = u16::from_be_bytes([ch[2], ch[3]]) as u32;
    if clen < 4 {
        count(Counter::MalformedL3);
        w.status = STOP_PASS;
        return false;
    }
    let this = w.off;
    w.off = this + ((clen + 3) & !3);
    if ctype == CHUNK_INIT {
        if let Charge::Over { .. } = bucket::charge(w.peer.conn_slot, w.now) {
            count(Counter::SynDropped);
            w.status = STOP_DROP;
            return false;
        }
        // A new association: its packets will carry a verification tag of their own
        // (INIT's is 0), so no state is in its way.
        count(Counter::NoPayload);
        w.status = STOP_PASS;
        return false;
    }
    if ctype != CHUNK_DATA && ctype != CHUNK_IDATA {
        return true;
    }
    let idata = ctype == CHUNK_IDATA;
    let Some(t) = load4(r.ctx, this + 4) else {
        count(Counter::MalformedL3);
        w.status = STOP_PASS;
        return false;
    };
    let tsn = u32::from_be_bytes(t);
    if r.assoc.is_null() {
        // No state (first packet we see, or LRU eviction): start at this TSN.
        // SAFETY: points into this CPU's walk value, valid for this program run.
        let key = unsafe { &*r.akey };
        let fresh = empty_assoc(tsn);
        #[allow(clippy::needless_borrows_for_generic_args)]
        if SCTP_ASSOCS.insert(key, &fresh, 0).is_err() {
            w.status = STOP_PASS;
            return false;
        }
        count(Counter::Resync);
        match SCTP_ASSOCS.get_ptr_mut(key) {
            Some(a) => r.assoc = a,
            None => {
                w.status = STOP_PASS;
                return false;
            }
        }
    }
    // SAFETY: the LRU value stays valid for this program run.
    let assoc = unsafe { &mut *r.assoc };
    if tsn_lt(tsn, assoc.next_tsn) {
        count(Counter::Retransmit);
        return true;
    }
    if tsn != assoc.next_tsn {
        // Past a hole: drop, so nothing is charged around it (bounded).
        if assoc.ofo_drops >= MAX_OFO_DROPS {
            // SAFETY: points into this CPU's walk value, valid for this program run.
            let key = unsafe { &*r.akey };
            let _ = SCTP_ASSOCS.remove(key);
            count(Counter::Resync);
            w.status = STOP_PASS;
            return false;
        }
        assoc.ofo_drops += 1;
        count(Counter::OutOfOrder);
        w.status = STOP_DROP;
        return false;
    }
    // Work on a copy: committed only if the packet is not dropped at this chunk.
    words::copy(&mut w.next, assoc);
    w.next.next_tsn = tsn.wrapping_add(1);
    w.next.ofo_drops = 0;
    if start_data(r, w, this, clen, cflags, idata) {
        w.scanning = 1;
    } else {
        // SAFETY: as above.
        words::copy(unsafe { &mut *r.assoc }, &w.next);
    }
    true
}

/// Sets up the scan of an in-order DATA/I-DATA chunk's Diameter bytes. False if
/// there is nothing to scan (not Diameter, or a fragment of a message already
/// decided).
#[inline(always)]
fn start_data(r: &WalkRef, w: &mut Walk, this: u32, clen: u32, cflags: u8, idata: bool) -> bool {
    // DATA: TSN, stream (2), SSN (2), PPID (4), data. I-DATA: TSN, stream (2),
    // reserved (2), MID (4), PPID or FSN (4), data.
    let (data_off, ppid_off) = if idata { (20, 16) } else { (16, 12) };
    if clen <= data_off {
        return false;
    }
    let Some(sid) = load4(r.ctx, this + 8) else {
        return false;
    };
    let stream = u16::from_be_bytes([sid[0], sid[1]]) as u32;
    let mid = if idata {
        match load4(r.ctx, this + 12) {
            Some(m) => u32::from_be_bytes(m),
            None => return false,
        }
    } else {
        0
    };
    let begin = cflags & FLAG_B != 0;
    w.keep = 1;
    if begin {
        let Some(p) = load4(r.ctx, this + ppid_off) else {
            return false;
        };
        let ppid = u32::from_be_bytes(p);
        if ppid != SCTP_PPID_DIAMETER && ppid != 0 {
            return false;
        }
        if w.next.in_progress != 0 {
            if idata {
                // Interleaved with the message in progress (RFC 8260): that one keeps
                // the association's scan.
                w.keep = 0;
            } else {
                // DATA: the message in progress never ended (its E fragment is
                // missing): forget it.
                w.next.in_progress = 0;
            }
        }
        w.cur.reset();
        w.start = 0;
    } else {
        let ours =
            w.next.in_progress != 0 && (!idata || (w.next.stream == stream && w.next.mid == mid));
        if !ours {
            // A later fragment of a message already decided (or not Diameter).
            return false;
        }
        w.cur.copy_from(&w.next.cursor);
        w.start = w.next.msg_off;
    }
    w.data_at = this + data_off;
    w.end = w.start + (clen - data_off);
    w.flags = cflags as u32;
    w.stream = stream;
    w.mid = mid;
    true
}

/// One scan item of the chunk being scanned, or its decision. Returns true to go on.
#[inline(always)]
fn scan_step(r: &WalkRef, w: &mut Walk) -> bool {
    let src = XdpSource(r.ctx);
    let c = match w.cur.step(&src, w.data_at as usize, w.start, w.end) {
        Progress::Read => return true,
        Progress::Done(c) => c,
        Progress::More if w.flags as u8 & FLAG_E == 0 && w.keep != 0 => {
            w.next.in_progress = 1;
            w.next.msg_off = w.end;
            w.next.stream = w.stream;
            w.next.mid = w.mid;
            w.next.cursor.copy_from(&w.cur);
            return accept(r, w);
        }
        Progress::More if w.keep == 0 => {
            // Decided on what its first fragment shows.
            count(Counter::OverBound);
            // SAFETY: the key points at this CPU's packet metadata, valid for this run.
            let key = unsafe { &*r.key };
            crate::events::flow(
                &XdpContext::new(r.ctx),
                crate::events::Event::OverBound,
                key,
            );
            match w.cur.scan.so_far() {
                Ok(c) => c,
                Err(_) => return accept(r, w),
            }
        }
        Progress::More | Progress::Invalid(_) => {
            // Ended (E) before the scan could finish, or not Diameter.
            count(Counter::MalformedDiameter);
            if w.keep != 0 {
                w.next.in_progress = 0;
            }
            return accept(r, w);
        }
    };
    if w.keep != 0 {
        w.next.in_progress = 0;
    }
    if !c.header.is_request() {
        count(Counter::Answers);
        return accept(r, w);
    }
    let slot = class_slot(&CLASS_SLOTS, w.peer.peer_id, w.peer.other_slot, c.class);
    // The agent's overload control first: a shed request charges no bucket.
    let mut v = overload::judge(c.class, w.cur.scan.drmp, w.now);
    if v == Verdict::Admit {
        v = decide(&w.peer, slot, w.now);
    }
    let bit = v.mark_bit();
    if bit != 0 {
        let rec = OobMark {
            // SAFETY: points at this CPU's packet metadata, valid for this program run.
            key: unsafe { *r.key },
            hop_by_hop: w.cur.scan.hop_by_hop,
            end_to_end: w.cur.scan.end_to_end,
            header_seq: 0,
            bits: bit as u32,
        };
        if OOB_MARKS.output::<OobMark>(&rec, 0).is_ok() {
            count(Counter::MarkedOutOfBand);
        } else {
            // Nowhere to say it: the packet goes, its retransmission is judged again.
            count(Counter::OobFull);
            v = Verdict::Drop;
        }
    }
    publish(&w.peer, slot, c.header.length, v);
    if v == Verdict::Drop {
        // The association stays as it was before this chunk: the retransmission
        // judges it again; the chunks before it stay charged.
        count(Counter::Dropped);
        w.status = STOP_DROP;
        return false;
    }
    accept(r, w)
}

/// The chunk is done and the packet goes on: commit the association.
#[inline(always)]
fn accept(r: &WalkRef, w: &mut Walk) -> bool {
    w.scanning = 0;
    // Always set before scanning begins; the check is for the verifier, which does
    // not know `scanning` (a map value) was 0 while `assoc` was null.
    if !r.assoc.is_null() {
        // SAFETY: the LRU value stays valid for this program run.
        words::copy(unsafe { &mut *r.assoc }, &w.next);
    }
    true
}
