//! The kernel matrix: every kernel `cargo xtask test` runs the fast path on, what each
//! is, where it comes from, what the fast path can do there and which tests run on it.
//! The README's "Requirements" table is this table's result.

/// A kernel of the matrix.
pub struct Kernel {
    /// Short name in xtask's output and under target/vm/.
    pub name: &'static str,
    /// Who runs it.
    pub what: &'static str,
    pub source: Source,
    /// What the fast path does on it; the guest's tests check the agent's probe says so.
    pub fast_path: FastPath,
    /// What runs in the guest, in order.
    pub steps: &'static [Step],
}

/// Where a kernel comes from.
pub enum Source {
    /// The kernel this machine runs: the privileged tests run on it directly, all of them.
    Host,
    /// The newest Debian package named `prefix` + number + `suffix` in the private apt
    /// sources ([`APT_SUITES`]), e.g. `linux-image-6.1.0-57-amd64`: the generic flavour
    /// (9p, veth, sctp and the BPF features as modules; `-cloud` has no 9p).
    Deb {
        prefix: &'static str,
        suffix: &'static str,
    },
}

/// What the fast path can do on a kernel.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum FastPath {
    /// Every program loads: XDP ingress and TC egress.
    Full,
    /// The programs cannot load (a helper they need is missing, e.g. `bpf_loop`): `dra
    /// run` refuses XDP naming it, or with `fallback = "userspace"` enforces the limits
    /// in the agent.
    Refused,
}

impl FastPath {
    /// The value of `DRA_EXPECT_FAST_PATH` the guest's tests compare the probe with.
    pub fn env(self) -> &'static str {
        match self {
            FastPath::Full => "full",
            FastPath::Refused => "refused",
        }
    }
}

/// One thing the guest runs.
pub enum Step {
    /// `dra verify`; its exit status must be success exactly when the fast path is
    /// [`FastPath::Full`].
    Verify,
    /// A test binary of the privileged tests (`tests/tests/<file>.rs`), all its tests.
    Tests(&'static str),
}

impl Step {
    /// The name of the verify step's log and console line.
    pub const VERIFY: &'static str = "dra-verify";
}

/// The private apt sources the kernels are fetched from (a state of its own under
/// target/vm/apt: the machine's apt sources are not changed): (archive, suite), all
/// `main`, signed by Debian's archive keyring.
pub const APT_SUITES: &[(&str, &str)] = &[
    ("http://deb.debian.org/debian", "bookworm"),
    ("http://deb.debian.org/debian-security", "bookworm-security"),
    ("http://deb.debian.org/debian", "bullseye"),
    ("http://deb.debian.org/debian-security", "bullseye-security"),
];

/// Debian 12's kernel, the one the README targets: `dra verify` and every privileged
/// test that depends on the kernel — the fixture tables, the differential test, the
/// real `dra run` with paced and coalesced limits (reject and drop), the fast path's
/// admissions against the GCRA model on the arrivals a packet tap recorded, TC egress
/// through clsact, the fast path's events and replanning, SCTP. Left to this machine
/// (they test the agent, not the kernel, and would not fit the time): the DRL loop
/// (`netns_drl`), live reload (`netns_reload`), the systemd unit's capabilities
/// (`netns_service`). `cargo xtask kernels debian12-6.1 --steps all` runs them all.
const DEBIAN12: &[Step] = &[
    Step::Verify,
    Step::Tests("kernel"),
    Step::Tests("verifier"),
    Step::Tests("fixtures"),
    Step::Tests("tc_fixtures"),
    Step::Tests("differential"),
    Step::Tests("fastpath_events"),
    Step::Tests("fastpath_replan"),
    Step::Tests("netns_fastpath"),
    Step::Tests("netns_coalesced"),
    Step::Tests("netns_replay"),
    Step::Tests("netns_events"),
    Step::Tests("netns_egress_only"),
    Step::Tests("tc_netns"),
    Step::Tests("netns_sctp"),
];

/// Where the programs cannot load: the refusal and the userspace fallback.
const REFUSED: &[Step] = &[Step::Verify, Step::Tests("kernel")];

/// The matrix.
pub const MATRIX: &[Kernel] = &[
    Kernel {
        name: "host",
        what: "this machine's kernel",
        source: Source::Host,
        fast_path: FastPath::Full,
        steps: &[],
    },
    Kernel {
        name: "debian12-6.1",
        what: "Debian 12 (bookworm), its stock kernel",
        source: Source::Deb {
            prefix: "linux-image-6.1.0-",
            suffix: "-amd64",
        },
        fast_path: FastPath::Full,
        steps: DEBIAN12,
    },
    Kernel {
        name: "debian11-5.10",
        what: "Debian 11 (bullseye), its stock kernel (no bpf_loop)",
        source: Source::Deb {
            prefix: "linux-image-5.10.0-",
            suffix: "-amd64",
        },
        fast_path: FastPath::Refused,
        steps: REFUSED,
    },
    Kernel {
        name: "debian12-6.12",
        what: "Debian 12's optional 6.12 (the kernel of Debian 13)",
        source: Source::Deb {
            prefix: "linux-image-6.12.",
            suffix: "+deb12-amd64",
        },
        fast_path: FastPath::Full,
        // The loader's probe, the TC fixtures (BPF_PROG_TEST_RUN) and the real `dra
        // run` with back-to-back traffic, reject and drop.
        steps: &[
            Step::Verify,
            Step::Tests("kernel"),
            Step::Tests("tc_fixtures"),
            Step::Tests("netns_coalesced"),
        ],
    },
];
