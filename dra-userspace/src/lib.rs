//! The `dra` agent as a library: config, Diameter core, routing, dynamic control,
//! dataplane. The binary (`src/main.rs`) is a thin shell over this.

pub mod agent;
pub mod config;
pub mod control;
pub mod dataplane;
pub mod diameter;
pub mod doic;
pub mod drl;
pub mod limiter;
pub mod metrics;
pub mod oob;
pub mod overload;
pub mod relay;
pub mod routing;
pub mod run;
pub mod session;
pub mod transport;

/// An error and its sources, "a: b: c", for logs.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
