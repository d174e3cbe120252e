//! JSON entry points for the Python package (`ssdlab.studies.flac.api`) and the bench script: a spec in,
//! a result out. Each run mounts a fresh file system on the image it is given.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::apps;
use crate::error::{FlacError, Result};
use crate::flac::{Flac, FlacConfig};
use crate::fs::{Fs, FsConfig};
use crate::micro::{self, MicroPoint, MicroSetup};

fn parse<T: for<'de> Deserialize<'de>>(v: &Value, what: &str) -> Result<T> {
    serde_json::from_value(v.clone()).map_err(|e| FlacError::Invalid(format!("{what}: {e}")))
}

/// Remove an image left by an earlier run (each run starts from an empty file system).
fn fresh(cfg: &FsConfig) -> Result<()> {
    match std::fs::remove_file(&cfg.flac.pm_path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(FlacError::io(format!("removing {}", cfg.flac.pm_path.display()), e)),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppSpec {
    app: String,
    #[serde(default)]
    cold: bool,
    #[serde(default)]
    tree: apps::TreeSpec,
    #[serde(default = "chunk")]
    chunk_bytes: usize,
    #[serde(default)]
    ints: u64,
    #[serde(default = "run_ints")]
    run_ints: usize,
    #[serde(default = "seed")]
    seed: u64,
}

fn chunk() -> usize {
    2 << 20
}
fn run_ints() -> usize {
    4 << 20
}
fn seed() -> u64 {
    42
}

fn app(fs: &Arc<Fs>, spec: &AppSpec) -> Result<Value> {
    // The counters at the start of the timed part; `program`: what changed until its end
    // (what the program itself did: set-up and checks are not in it).
    let warm_or_cold = |fs: &Fs| -> Result<Value> {
        if spec.cold {
            fs.drop_caches()?;
        } else {
            fs.sync()?;
        }
        Ok(fs.stats())
    };
    let since = |before: &Value| crate::fs::calls::delta(&fs.stats(), before);
    let program;
    let (r, check) = match spec.app.as_str() {
        "grep" => {
            let want = apps::make_tree(fs, &spec.tree)?;
            let before = warm_or_cold(fs)?;
            let r = apps::grep(fs, &spec.tree.root, &spec.tree.pattern, spec.chunk_bytes)?;
            program = since(&before);
            if r.result != want {
                return Err(FlacError::Invalid(format!("grep found {} matching lines, the tree has {want}", r.result)));
            }
            (r, json!({"matching_lines": want}))
        }
        "tar" => {
            apps::make_tree(fs, &spec.tree)?;
            let src_sum = apps::tree_checksum(fs, &spec.tree.root)?;
            let before = warm_or_cold(fs)?;
            let c = apps::tar_create(fs, &spec.tree.root, "/archive.tar", spec.chunk_bytes)?;
            let x = apps::tar_extract(fs, "/archive.tar", "/extract", spec.chunk_bytes)?;
            program = since(&before);
            let sum = apps::tree_checksum(fs, "/extract")?;
            if sum != src_sum {
                return Err(FlacError::Invalid("tar: the extracted tree differs from the source".into()));
            }
            let r = apps::AppResult {
                seconds: c.seconds + x.seconds,
                bytes_read: c.bytes_read + x.bytes_read,
                bytes_written: c.bytes_written + x.bytes_written,
                result: x.result,
                checksum: sum,
            };
            (r, json!({"create_seconds": c.seconds, "extract_seconds": x.seconds, "files": x.result}))
        }
        "bigsort" => {
            if spec.ints == 0 {
                return Err(FlacError::Invalid("bigsort: ints must be positive".into()));
            }
            apps::make_ints(fs, "/ints.bin", spec.ints, spec.seed)?;
            let before = warm_or_cold(fs)?;
            let r = apps::bigsort(fs, "/ints.bin", "/sorted.bin", "/sorttmp", spec.run_ints, spec.chunk_bytes)?;
            program = since(&before);
            let (n, sum) = apps::check_sorted(fs, "/sorted.bin")?;
            if n != spec.ints || sum != r.checksum {
                return Err(FlacError::Invalid("bigsort: the output is not the sorted input".into()));
            }
            (r, json!({"ints": n}))
        }
        a => return Err(FlacError::Invalid(format!("app must be grep, tar or bigsort, got {a:?}"))),
    };
    Ok(json!({"result": r, "check": check, "stats": fs.stats(), "program": program}))
}

/// Run the spec (JSON) and return the result (JSON).
///
/// `{"kind": "micro", "fs": FsConfig, "setup": MicroSetup, "points": [MicroPoint]}`,
/// `{"kind": "app", "fs": FsConfig, "app": {...}}`,
/// `{"kind": "attach", "flac": FlacConfig, "sizes": [...], "budget_bytes": n}`,
/// `{"kind": "faults", "flac": FlacConfig, "pages": n}`,
/// `{"kind": "kernel_costs", "dir": path, "repeats": n}` (per-call costs on that directory's
/// file system, [`crate::kcost`]),
/// `{"kind": "attach_alternatives", "sizes": [...], "repeats": n}` ([`crate::attach_alt`]).
pub fn run_json(spec: &str) -> Result<String> {
    let v: Value = serde_json::from_str(spec).map_err(|e| FlacError::Invalid(format!("run spec: {e}")))?;
    let kind = v.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let out = match kind {
        "micro" | "app" => {
            let cfg: FsConfig = parse(v.get("fs").unwrap_or(&Value::Null), "fs")?;
            fresh(&cfg)?;
            let fs = Fs::mount(cfg)?;
            let r = if kind == "micro" {
                let setup: MicroSetup = parse(v.get("setup").unwrap_or(&json!({})), "setup")?;
                let points: Vec<MicroPoint> = parse(v.get("points").unwrap_or(&json!([{}])), "points")?;
                let res = micro::run_points(&fs, &setup, &points)?;
                json!({"points": res, "stats": fs.stats()})
            } else {
                app(&fs, &parse(v.get("app").unwrap_or(&Value::Null), "app")?)?
            };
            fs.unmount()?;
            r
        }
        "attach" | "faults" => {
            let cfg: FlacConfig = parse(v.get("flac").unwrap_or(&Value::Null), "flac")?;
            let _ = std::fs::remove_file(&cfg.pm_path);
            let flac = Flac::init(cfg)?;
            if kind == "attach" {
                let sizes: Vec<usize> = parse(v.get("sizes").unwrap_or(&json!([4096, 65536, 2097152])), "sizes")?;
                let budget = v.get("budget_bytes").and_then(|b| b.as_u64()).unwrap_or(256 << 20) as usize;
                serde_json::to_value(crate::bench::attach_vs_memcpy(&flac, &sizes, budget)?).unwrap()
            } else {
                let pages = v.get("pages").and_then(|b| b.as_u64()).unwrap_or(4096) as usize;
                serde_json::to_value(crate::bench::fault_costs(&flac, pages)?).unwrap()
            }
        }
        "attach_alternatives" => {
            let sizes: Vec<usize> = parse(v.get("sizes").unwrap_or(&json!([4096, 65536, 524288, 2097152])), "sizes")?;
            let reps = v.get("repeats").and_then(|r| r.as_u64()).unwrap_or(21) as usize;
            serde_json::to_value(crate::attach_alt::measure(&sizes, reps)?).unwrap()
        }
        "kernel_costs" => {
            let dir = v.get("dir").and_then(|d| d.as_str()).unwrap_or("/dev/shm");
            let repeats = v.get("repeats").and_then(|r| r.as_u64()).unwrap_or(21) as usize;
            serde_json::to_value(crate::kcost::measure(std::path::Path::new(dir), repeats)?).unwrap()
        }
        k => {
            return Err(FlacError::Invalid(format!(
                "run spec: kind must be micro, app, attach, faults, kernel_costs or attach_alternatives, got {k:?}"
            )))
        }
    };
    Ok(out.to_string())
}
