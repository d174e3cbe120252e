//! One measured run: a backend, a local-memory budget and a workload, as `ssdlab reproduce
//! dpuswap` and the Python API (`ssdlab.studies.dpuswap.api.run`) describe it in a spec.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::RmmlConfig;
use crate::device::{LocalMemory, SwapDevice, PAGE_BYTES};
use crate::error::{Error, Result};
use crate::infiniswap::{Infiniswap, InfiniswapConfig};
use crate::node::{LocalNode, MemoryNode, TcpNode};
use crate::paging::{Paged, PagingConfig};
use crate::rmml::Rmml;
use crate::workload::{run_fio, run_kv, run_sort, FioConfig, KvConfig, SortConfig};
use crate::znswap::{Znswap, ZnswapConfig};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Kv(KvConfig),
    Sort(SortConfig),
    Fio(FioConfig),
}

impl Workload {
    /// Bytes of the paged region the workload needs (its working set); 0 for fio.
    pub fn region_bytes(&self) -> u64 {
        match self {
            Workload::Kv(k) => k.region_bytes(),
            Workload::Sort(s) => s.region_bytes(),
            Workload::Fio(_) => 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// "dpuswap", "infiniswap", "znswap" or "local".
    pub backend: String,
    /// Local memory as a fraction of the working set (1.0: everything local, no swapping).
    #[serde(default = "one")]
    pub local_fraction: f64,
    /// What runs on the paged memory (required by [`run`]; `ssdlab rmml serve` exports the
    /// backend over NBD and needs none).
    #[serde(default)]
    pub workload: Option<Workload>,
    #[serde(default)]
    pub paging: PagingConfig,
    #[serde(default)]
    pub rmml: RmmlConfig,
    #[serde(default)]
    pub infiniswap: InfiniswapConfig,
    /// The ZNSwap-like baseline's device and parameters (capacity_bytes is set by the run).
    pub znswap: Option<ZnswapConfig>,
    /// Remote memory nodes (HOST:PORT of `ssdlab rmml node` processes); none: in-process nodes.
    #[serde(default)]
    pub nodes: Vec<String>,
    #[serde(default = "two")]
    pub local_nodes: u32,
    #[serde(default = "local_node_bytes")]
    pub local_node_bytes: u64,
}

fn one() -> f64 {
    1.0
}
fn two() -> u32 {
    2
}
fn local_node_bytes() -> u64 {
    4 << 30
}

fn nodes(spec: &RunSpec) -> Result<Vec<Box<dyn MemoryNode>>> {
    if spec.nodes.is_empty() {
        if spec.local_nodes == 0 {
            return Err(Error::Config("local_nodes: expected at least 1 when no nodes are given".into()));
        }
        return Ok((0..spec.local_nodes).map(|i| Box::new(LocalNode::new(spec.local_node_bytes, i + 1)) as Box<dyn MemoryNode>).collect());
    }
    spec.nodes.iter().enumerate().map(|(i, a)| TcpNode::connect(a, i).map(|n| Box::new(n) as Box<dyn MemoryNode>)).collect()
}

/// The swap device of `spec.backend` with room for `bytes` of swap.
pub fn backend(spec: &RunSpec, bytes: u64) -> Result<Box<dyn SwapDevice>> {
    let round = |g: u64| bytes.max(1).div_ceil(g) * g;
    Ok(match spec.backend.as_str() {
        "dpuswap" => {
            let mut c = spec.rmml.clone();
            c.capacity_bytes = round(c.block_bytes * c.group_blocks as u64);
            Box::new(Rmml::new(c, nodes(spec)?)?)
        }
        "infiniswap" => {
            let mut c = spec.infiniswap.clone();
            c.capacity_bytes = round(c.slab_bytes);
            Box::new(Infiniswap::new(c, nodes(spec)?)?)
        }
        "znswap" => {
            let mut c = spec.znswap.clone().ok_or_else(|| Error::Config("backend znswap needs a [znswap] device".into()))?;
            c.capacity_bytes = round(PAGE_BYTES);
            Box::new(Znswap::new(c)?)
        }
        "local" => Box::new(LocalMemory { capacity_bytes: round(PAGE_BYTES) }),
        other => return Err(Error::Config(format!("backend = {other:?}: expected dpuswap, infiniswap, znswap or local"))),
    })
}

/// Run `spec`; `progress` gets the fraction done and returns false to stop.
pub fn run(spec: &RunSpec, progress: &mut dyn FnMut(f64) -> bool) -> Result<serde_json::Value> {
    if !(spec.local_fraction > 0.0 && spec.local_fraction <= 1.0) {
        return Err(Error::Config(format!("local_fraction = {}: expected 0 < f <= 1", spec.local_fraction)));
    }
    let wall = std::time::Instant::now();
    let Some(workload) = &spec.workload else {
        return Err(Error::Config("a run needs a workload: one [workload.kv], [workload.sort] or [workload.fio] table".into()));
    };
    if let Workload::Fio(f) = workload {
        let mut dev = backend(spec, f.span_bytes)?;
        let res = run_fio(dev.as_mut(), f)?;
        return Ok(json!({"backend": spec.backend, "workload": res, "device": dev.stats(), "wall_s": wall.elapsed().as_secs_f64()}));
    }
    let region = workload.region_bytes();
    let pages = region.div_ceil(PAGE_BYTES);
    let budget = ((pages as f64 * spec.local_fraction).ceil() as u64).max(spec.paging.evict_batch as u64 + 1);
    let all_local = budget >= pages;
    let dev: Box<dyn SwapDevice> = if all_local {
        Box::new(LocalMemory { capacity_bytes: region })
    } else {
        // Room for everything that can be out at once, plus a batch in flight; read-ahead pages
        // keep their slots while in memory, so with readahead up to the budget more.
        let cached = if spec.paging.readahead_pages > 1 { budget } else { 0 };
        backend(spec, (pages - budget + cached + 2 * spec.paging.evict_batch as u64) * PAGE_BYTES)?
    };
    let mut mem = Paged::new(region, PagingConfig { budget_pages: budget, ..spec.paging.clone() }, dev)?;
    let res = match workload {
        Workload::Kv(k) => run_kv(&mut mem, k, progress)?,
        Workload::Sort(s) => run_sort(&mut mem, s)?,
        Workload::Fio(_) => unreachable!("handled above"),
    };
    let stats = mem.stats();
    drop(mem);
    Ok(json!({
        "backend": if all_local { "local" } else { spec.backend.as_str() },
        "local_fraction": spec.local_fraction, "working_set_bytes": region, "budget_pages": budget,
        "workload": res, "paging": stats, "wall_s": wall.elapsed().as_secs_f64(),
    }))
}
