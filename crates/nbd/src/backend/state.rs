//! The device state file (`IMAGE.ssdlab-state`): a snapshot of the device and the config it
//! was made with, written atomically.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use ssdlab_core::Device;

use super::{BackendError, Result, FORMAT_VERSION};

const STATE_MAGIC: &[u8; 8] = b"SSDLABST";

#[derive(Serialize, Deserialize)]
pub(super) struct StateFile {
    pub(super) generation: u64,
    pub(super) config: String,
    pub(super) device: Device,
}

pub(super) fn read_state(bytes: &[u8], path: &Path) -> Result<StateFile> {
    let bad = |why: &str| BackendError::msg(format!("{}: {why}", path.display()));
    if bytes.len() < 12 || &bytes[..8] != STATE_MAGIC {
        return Err(bad("not an ssdlab device state file"));
    }
    let v = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if v != FORMAT_VERSION {
        return Err(bad(&format!("state format {v}, this ssdlab reads {FORMAT_VERSION}")));
    }
    bincode::deserialize(&bytes[12..]).map_err(|e| match *e {
        // bincode's end of input carries no text ("io error: "): say what it means.
        bincode::ErrorKind::Io(ref io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            bad(&format!("truncated: the file ends before its contents do ({} bytes)", bytes.len()))
        }
        _ => bad(&format!("cannot be read ({e})")),
    })
}

/// Write the state atomically: a temporary file, fsync, rename, fsync of the directory.
pub(super) fn write_state(path: &Path, generation: u64, config: &str, dev: &Device) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    {
        let mut f = File::create(&tmp)?;
        f.write_all(STATE_MAGIC)?;
        f.write_all(&FORMAT_VERSION.to_le_bytes())?;
        // Same layout as StateFile, without copying the device.
        #[derive(Serialize)]
        struct StateRef<'a> {
            generation: u64,
            config: &'a str,
            device: &'a Device,
        }
        let st = StateRef { generation, config, device: dev };
        bincode::serialize_into(std::io::BufWriter::new(&mut f), &st).map_err(|e| BackendError::msg(e.to_string()))?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Top-level config sections that differ between two config JSON texts.
pub(super) fn config_difference(a: &str, b: &str) -> String {
    let (a, b): (Value, Value) = (serde_json::from_str(a).unwrap_or(Value::Null), serde_json::from_str(b).unwrap_or(Value::Null));
    let mut keys = vec![];
    if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
        for (k, v) in a {
            if b.get(k) != Some(v) {
                keys.push(k.clone());
            }
        }
    }
    if keys.is_empty() {
        "unknown difference".into()
    } else {
        format!("differs in {}", keys.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_state_file_says_so() {
        let mut bytes = STATE_MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&[7, 0, 0]);
        let e = read_state(&bytes, Path::new("dev.state")).err().expect("a cut file is refused").0;
        assert!(e.contains("dev.state: truncated") && !e.contains("io error: )"), "{e}");
    }
}
