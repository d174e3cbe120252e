//! dpuswap (crates/rmml) served: its swap backends as NBD disks ([`export`]) and its
//! remote-memory node on the async server core ([`node`]).

pub mod export;
pub mod node;
