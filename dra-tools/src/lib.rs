//! Tools around the `dra` agent, not part of the product: the Diameter simulator
//! (`dra-loadgen`), the load-balancing simulator (`dra-sim`), the relay benchmark
//! (`dra-bench`) and test support (pcap files for tshark). They drive the agent's own
//! library (`dra`): its Diameter codec, peer state machine and selection strategies.
//!
//! - [`loadgen`]: gateways and PCRF/OCS servers over real TCP, scenario, closed-loop and
//!   scripted modes.
//! - [`sim`]: the deterministic load-balancing simulator behind `dra-sim lb`.
//! - [`pcap`]: classic pcap files of one TCP connection, and tshark's verdict on them.
//! - [`netns`]: network namespaces joined by veth pairs (the relay benchmark, the
//!   freeDiameter interop test).
//! - [`freediameter`]: what freeDiameter needs to run beside the agent (its certificate).
//! - [`pki`]: a test CA and certificates generated at run time, for TLS peers.

pub mod freediameter;
pub mod loadgen;
pub mod netns;
pub mod pcap;
pub mod pki;
pub mod sim;
