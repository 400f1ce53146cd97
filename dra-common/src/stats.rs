//! Global fast-path counters: one slot each in a per-CPU array, so every exit path of
//! the programs is counted without logging.

/// Index into the `STATS` per-CPU array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Packets seen by the XDP program.
    Packets = 0,
    /// Not IPv4/IPv6, or not TCP/SCTP, or not on a Diameter port.
    NotDiameter,
    /// IP fragments (passed; the stack reassembles).
    Fragment,
    /// Headers the program could not parse (truncated L2/L3/L4): passed.
    MalformedL3,
    /// Diameter bytes that fail header or AVP validation: passed, flow resynchronises.
    MalformedDiameter,
    /// Source is not a configured peer: passed under policy `pass`.
    UnknownPeerPass,
    /// Source is not a configured peer: dropped under policy `drop`.
    UnknownPeerDrop,
    /// Flow state was missing or lost; framing recovered by header validation.
    Resync,
    /// A segment held more messages than the per-segment bound.
    OverBound,
    /// Diameter answers (never limited).
    Answers,
    /// Requests classified (counted once).
    Requests,
    /// Segments (or TSNs) that carried only bytes already charged.
    Retransmit,
    /// Segments that arrived past a hole in the sequence space.
    OutOfOrder,
    /// TCP SYN / SCTP INIT over the connection guard's limit: dropped.
    SynDropped,
    /// Packets dropped by a `drop` profile.
    Dropped,
    /// Requests marked for rejection.
    Marked,
    /// TC egress: requests counted towards upstream peers.
    EgressRequests,
    /// TC egress: packets dropped by the egress policer.
    EgressDropped,
    /// Segments passed uncharged: no flow state and no header at the segment start.
    Unframed,
    /// TCP segments without payload (handshake, ACKs) on a Diameter port.
    NoPayload,
    /// Requests marked out of band: their flags byte had passed in an earlier segment
    /// when their class became known, so the verdict went to the agent through the
    /// `OOB_MARKS` ring buffer instead of the header bit.
    MarkedOutOfBand,
    /// The protocol program was not installed in the jump table (setup error).
    NoProgram,
    /// TC egress: packets seen.
    EgressPackets,
    /// TC egress: Diameter answers sent (never counted per slot, never policed).
    EgressAnswers,
    /// TC egress: segments that carried only bytes already counted.
    EgressRetransmit,
    /// TC egress: flow state missing, lost or invalid; framing restarted.
    EgressResync,
    /// TC egress: segments passed uncounted (no flow state, no header at the start).
    EgressUnframed,
    /// Segments dropped because an out-of-band mark could not be handed over (the
    /// `OOB_MARKS` ring was full): the retransmission is judged again.
    OobFull,
    /// Requests the overload control shed, marked to be answered 3004 by the agent.
    ShedAnswered,
    /// Requests shed beyond the agent's answer budget, marked to be discarded.
    ShedDiscarded,
    /// Number of counters (array size).
    Count,
}

impl Counter {
    pub const COUNT: u32 = Counter::Count as u32;

    /// Every real counter, in index order.
    pub const ALL: [Counter; Counter::Count as usize] = [
        Counter::Packets,
        Counter::NotDiameter,
        Counter::Fragment,
        Counter::MalformedL3,
        Counter::MalformedDiameter,
        Counter::UnknownPeerPass,
        Counter::UnknownPeerDrop,
        Counter::Resync,
        Counter::OverBound,
        Counter::Answers,
        Counter::Requests,
        Counter::Retransmit,
        Counter::OutOfOrder,
        Counter::SynDropped,
        Counter::Dropped,
        Counter::Marked,
        Counter::EgressRequests,
        Counter::EgressDropped,
        Counter::Unframed,
        Counter::NoPayload,
        Counter::MarkedOutOfBand,
        Counter::NoProgram,
        Counter::EgressPackets,
        Counter::EgressAnswers,
        Counter::EgressRetransmit,
        Counter::EgressResync,
        Counter::EgressUnframed,
        Counter::OobFull,
        Counter::ShedAnswered,
        Counter::ShedDiscarded,
    ];

    /// Stable snake_case name (metrics label).
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Packets => "packets",
            Counter::NotDiameter => "not_diameter",
            Counter::Fragment => "fragment",
            Counter::MalformedL3 => "malformed_l3",
            Counter::MalformedDiameter => "malformed_diameter",
            Counter::UnknownPeerPass => "unknown_peer_pass",
            Counter::UnknownPeerDrop => "unknown_peer_drop",
            Counter::Resync => "resync",
            Counter::OverBound => "over_bound",
            Counter::Answers => "answers",
            Counter::Requests => "requests",
            Counter::Retransmit => "retransmit",
            Counter::OutOfOrder => "out_of_order",
            Counter::SynDropped => "syn_dropped",
            Counter::Dropped => "dropped",
            Counter::Marked => "marked",
            Counter::EgressRequests => "egress_requests",
            Counter::EgressDropped => "egress_dropped",
            Counter::Unframed => "unframed",
            Counter::NoPayload => "no_payload",
            Counter::MarkedOutOfBand => "marked_out_of_band",
            Counter::NoProgram => "no_program",
            Counter::EgressPackets => "egress_packets",
            Counter::EgressAnswers => "egress_answers",
            Counter::EgressRetransmit => "egress_retransmit",
            Counter::EgressResync => "egress_resync",
            Counter::EgressUnframed => "egress_unframed",
            Counter::OobFull => "oob_full",
            Counter::ShedAnswered => "shed_answered",
            Counter::ShedDiscarded => "shed_discarded",
            Counter::Count => "count",
        }
    }
}
