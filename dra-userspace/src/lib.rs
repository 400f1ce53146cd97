//! The `dra` agent as a library: config, Diameter core, routing, dynamic control,
//! dataplane. The binary (`src/main.rs`) is a thin shell over this.

pub mod config;
pub mod control;
pub mod dataplane;
pub mod diameter;
pub mod metrics;
pub mod relay;
pub mod routing;
pub mod sim;
