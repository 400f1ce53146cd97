//! One line of TCP framing (docs/architecture.md §3), shared by XDP ingress (a flow's
//! main line and its island) and TC egress.
//!
//! A [`Line`] says where the next Diameter header starts (`next_hdr`) and which bytes
//! were looked at (`processed_end`: every byte before it exactly once), with the scan
//! state of a message a segment's end cut. A walk ([`LineWalk`]) takes the bytes of one
//! segment new to the line, one message (or one scan item of it, see
//! [`Judge::ONE_ITEM_PER_STEP`]) per step: [`step`] classifies the message at `pos`
//! with the [`ScanCursor`] (reading only the items it needs) and hands it to the
//! direction's [`Judge`], which decides and counts a request; [`commit`] then writes
//! the walk back to the line. A request is judged exactly once, in the segment where
//! its class becomes known, whatever the cuts before it; a dropped one is judged again
//! when its bytes come again, and those before it in the same segment stay charged.

use aya_ebpf::maps::{LruHashMap, PerCpuArray};
use dra_common::{
    maps::{EgressFlow, FlowKey, ISLAND_NONE, Line, TcpFlow},
    wire::{MsgClass, MsgScan, Progress, ScanCursor, Scanned, Source},
    words,
};

use crate::{
    parse::seq_lt,
    walk::{self, Steps},
};

/// The walk goes on (or ended at the segment's end, or at its step bound).
pub const RUNNING: u32 = 0;
/// The message at `pos` continues in a later segment (scan state kept).
pub const CARRY: u32 = 1;
/// A request was dropped at `drop_pos` and the walk stopped there.
pub const DROPPED: u32 = 2;
/// The bytes at `pos` are not valid Diameter.
pub const LOST: u32 = 3;

/// A walk over one segment's bytes new to a line. It lives in a per-CPU map value with
/// the direction's own walk state, not on the stack: the verifier explores a `bpf_loop`
/// callback until the caller's state converges and tracks stack scalars (scan phase,
/// AVP count, ...) exactly, so a walk on the stack never converges; map value contents
/// are not tracked (see walk.rs).
#[repr(C)]
pub struct LineWalk {
    pub now: u64,
    /// Sequence number of the segment's first payload byte, and where the walk stops
    /// looking (the segment's end, or an island's start).
    pub seq: u32,
    pub seg_end: u32,
    /// First byte new to the line (its `processed_end` when the segment arrived).
    pub fresh: u32,
    /// Where the message being looked at starts.
    pub pos: u32,
    /// Packet offset of the segment's payload.
    pub payload: u32,
    /// [`RUNNING`], [`CARRY`], [`DROPPED`] or [`LOST`].
    pub status: u32,
    /// 1: a request was dropped at `drop_pos` (the walk may have gone on past it).
    pub dropped: u32,
    pub drop_pos: u32,
    /// Classification of the message at `pos`.
    pub cur: ScanCursor,
}

impl LineWalk {
    /// Starts a walk of the segment `seq..end` (payload at packet offset `payload`)
    /// continuing `line`. True if the line's message at `next_hdr` was in progress
    /// (its scan state carried over).
    #[inline(always)]
    pub fn begin(&mut self, line: &Line, seq: u32, end: u32, payload: u32, now: u64) -> bool {
        self.now = now;
        self.seq = seq;
        self.seg_end = end;
        self.fresh = line.processed_end;
        self.pos = line.next_hdr;
        self.payload = payload;
        self.status = RUNNING;
        self.dropped = 0;
        let in_progress = seq_lt(line.next_hdr, line.processed_end);
        if in_progress {
            self.cur.copy_from(&line.cursor);
        } else {
            self.cur.reset();
        }
        in_progress
    }

    /// The request at `pos` is dropped; `stop`: the walk ends here.
    #[inline(always)]
    pub fn drop_here(&mut self, stop: bool) {
        self.dropped = 1;
        self.drop_pos = self.pos;
        if stop {
            self.status = DROPPED;
        }
    }

    /// The scan of the message being looked at (its Hop-by-Hop and End-to-End ids).
    #[inline(always)]
    pub fn scan(&self) -> &MsgScan {
        &self.cur.scan
    }

    /// Where a packet's part of the message at `pos` begins, as (offset in the message,
    /// offset in the packet): all of the message when it begins in this segment, else
    /// its bytes from `fresh` on (those before were given to the scan already).
    #[inline(always)]
    fn piece(&self) -> (u32, usize) {
        let (start, first) = if seq_lt(self.pos, self.fresh) {
            (self.fresh.wrapping_sub(self.pos), self.fresh)
        } else {
            (0, self.pos)
        };
        (
            start,
            self.payload.wrapping_add(first.wrapping_sub(self.seq)) as usize,
        )
    }
}

/// What a direction does with a message the line classified.
pub trait Judge {
    /// One step reads one scan item (header, ids, an AVP header) rather than all a
    /// message needs. A loop of scan items inside a `bpf_loop` callback is checked by
    /// the verifier per item, per path into it: affordable with XDP's packet reads,
    /// beyond the verifier's budget with `bpf_skb_load_bytes` and the three buckets TC
    /// charges. Whole messages per step save a callback per item.
    const ONE_ITEM_PER_STEP: bool;
    /// The packet's bytes.
    type Bytes: Source;
    fn bytes(&self) -> Self::Bytes;
    /// The walk, in its per-CPU map value.
    fn walk(&mut self) -> &mut LineWalk;
    /// Decides and counts the request of `class` and `len` bytes at the walk's `pos`.
    /// False stops the walk (the judge has called [`LineWalk::drop_here`]).
    fn request(&mut self, class: MsgClass, len: u32) -> bool;
    /// Counts an answer.
    fn answer(&mut self);
}

/// A line's walk is stepped by `bpf_loop` through its judge: one [`step`] per iteration.
impl<J: Judge> Steps for J {
    #[inline(always)]
    fn step(&mut self) -> bool {
        step(self)
    }
}

/// One step of a line's walk: classifies the message at `pos` (from where an earlier
/// segment left its scan; one item of it if [`Judge::ONE_ITEM_PER_STEP`]) and, once
/// classified, has `j` judge it. True to go on: the message or another one goes on
/// before the walk's end.
#[inline(always)]
pub fn step<J: Judge>(j: &mut J) -> bool {
    let bytes = j.bytes();
    let w = j.walk();
    if !seq_lt(w.pos, w.seg_end) {
        return false;
    }
    let (start, off) = w.piece();
    let left = w.seg_end.wrapping_sub(w.pos);
    let scanned = if J::ONE_ITEM_PER_STEP {
        match w.cur.step(&bytes, off, start, left) {
            Progress::Read => return true,
            Progress::Done(c) => Scanned::Done(c),
            Progress::More => Scanned::More,
            Progress::Invalid(e) => Scanned::Invalid(e),
        }
    } else {
        w.cur.advance(&bytes, off, start, left)
    };
    let c = match scanned {
        Scanned::Done(c) => c,
        Scanned::More => {
            w.status = CARRY;
            return false;
        }
        Scanned::Invalid(_) => {
            w.status = LOST;
            return false;
        }
    };
    let len = c.header.length;
    if c.header.is_request() {
        if !j.request(c.class, len) {
            return false;
        }
    } else {
        j.answer();
    }
    let w = j.walk();
    w.pos = w.pos.wrapping_add(len);
    w.cur.reset();
    seq_lt(w.pos, w.seg_end)
}

/// Walks a segment, at most `max` steps in `bpf_loop`. A walk of whole messages takes
/// the first one here, before the loop: most segments hold one message, and a
/// `bpf_loop` call (an indirect call per iteration) costs more than the message. A walk
/// of single items goes to the loop at once (a second copy of its step in the program
/// costs more verifier states than the one item saves).
#[inline(always)]
pub fn walk<J: Judge>(max: u32, j: &mut J) {
    if !J::ONE_ITEM_PER_STEP && !step(j) {
        return;
    }
    walk::run(max, j);
}

/// What a walk did to its line.
#[derive(PartialEq, Eq)]
pub enum Outcome {
    /// The line moved on (or stayed, its message in progress).
    Moved,
    /// A request was dropped: the line is committed up to it.
    Dropped,
    /// Invalid Diameter.
    Lost,
    /// More messages than one walk may take.
    Bound,
}

/// Commits a walk's outcome to `line`, whose message at `next_hdr` was in progress
/// when the segment arrived if `in_progress`.
#[inline(always)]
pub fn commit(line: &mut Line, w: &LineWalk, in_progress: bool) -> Outcome {
    if w.dropped != 0 {
        // Commit the requests decided before the dropped one. If the dropped one is
        // the message that was in progress, its state stays as it was (the
        // retransmission scans this segment's part of it again).
        if !(in_progress && w.drop_pos == line.next_hdr) {
            line.next_hdr = w.drop_pos;
            line.processed_end = w.drop_pos;
        }
        return Outcome::Dropped;
    }
    match w.status {
        LOST => Outcome::Lost,
        RUNNING if seq_lt(w.pos, w.seg_end) => Outcome::Bound,
        _ => {
            follow(line, w);
            Outcome::Moved
        }
    }
}

/// Moves `line` to where the walk `w` ended with its framing intact ([`framed`]): the
/// message at `pos` next, in progress (its scan state kept) if the walk carried it.
#[inline(always)]
pub fn follow(line: &mut Line, w: &LineWalk) {
    line.next_hdr = w.pos;
    line.processed_end = w.seg_end;
    if w.status == CARRY {
        line.cursor.copy_from(&w.cur);
    }
}

/// Whether the walk ended at its end with its framing intact (a message in progress
/// or none): where a line may continue.
#[inline(always)]
pub fn framed(w: &LineWalk) -> bool {
    w.status == CARRY || (w.status == RUNNING && !seq_lt(w.pos, w.seg_end))
}

/// Flow state that starts with a line.
pub trait Flow: 'static {
    /// Makes `self` a fresh flow whose next header starts at `seq`.
    fn fresh(&mut self, seq: u32);
}

#[inline(always)]
fn fresh_line(line: &mut Line, seq: u32) {
    line.next_hdr = seq;
    line.processed_end = seq;
    line.cursor.reset();
}

impl Flow for TcpFlow {
    #[inline(always)]
    fn fresh(&mut self, seq: u32) {
        fresh_line(&mut self.line, seq);
        words::zero(&mut self.marked);
        self.mark_idx = 0;
        self.ofo_drops = 0;
        self.hole_since_ns = 0;
        self.island.state = ISLAND_NONE;
    }
}

impl Flow for EgressFlow {
    #[inline(always)]
    fn fresh(&mut self, seq: u32) {
        fresh_line(&mut self.line, seq);
    }
}

/// Inserts fresh state for `key` whose next header starts at `seq` into `flows`. The
/// value is built in a per-CPU `scratch` slot (kept off the 512-byte BPF stack).
#[inline(always)]
pub fn new_flow<F: Flow>(
    flows: &LruHashMap<FlowKey, F>,
    scratch: &PerCpuArray<F>,
    key: &FlowKey,
    seq: u32,
) -> Option<&'static mut F> {
    let p = scratch.get_ptr_mut(0)?;
    // SAFETY: this CPU's scratch value.
    let st = unsafe { &mut *p };
    st.fresh(seq);
    #[allow(clippy::needless_borrows_for_generic_args)]
    flows.insert(key, &*st, 0).ok()?;
    // SAFETY: just inserted; the LRU value stays valid for this program run.
    flows.get_ptr_mut(key).map(|p| unsafe { &mut *p })
}
