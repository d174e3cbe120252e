//! Applications on the log-structured API: a key-value store ([`kv`], behind the [`KvStore`]
//! trait so other stores can be plugged in; [`leveldb`] is a LevelDB-like one), YCSB request mixes ([`ycsb`]), and a
//! log-structured block store ([`logdisk`]) for fio-like jobs and trace replay, the role the
//! document's vLFS plays for applications that cannot be changed.

pub mod kv;
pub mod leveldb;
pub mod logdisk;
pub mod ycsb;

pub use kv::{KvStats, KvStore, LogKv, LogKvConfig, Put, Value, WriteTicket};
pub use leveldb::{LevelKv, LevelKvConfig};
pub use logdisk::{LogDisk, LogDiskStats};
pub use ycsb::{Mix, Ycsb, YcsbOp, YcsbSpec};
