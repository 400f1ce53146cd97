//! Helpers for the privileged tests: network namespaces and veth pairs that are always
//! removed (RAII, also on panic), addresses only from 198.18.0.0/15 and 2001:db8::/32.

pub mod agent;
pub mod netns;
pub mod pkt;
pub mod sim;
pub mod support;
pub mod traffic;
