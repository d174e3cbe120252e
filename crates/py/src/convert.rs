//! Typed conversions across the boundary: Python dicts, lists and scalars to the core's serde
//! types and back (pythonize), so nothing crosses as JSON text.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt};
use pythonize::{depythonize, pythonize};
use serde::de::DeserializeOwned;
use serde::Serialize;

use ssdlab_core::config::{Config, WorkloadConfig};

use crate::errors::{core_err, ConfigError};

/// A core value as a Python object (structs and maps become dicts, sequences lists).
pub(crate) fn to_py<'py, T: Serialize + ?Sized>(py: Python<'py>, value: &T) -> PyResult<Bound<'py, PyAny>> {
    Ok(pythonize(py, value)?)
}

/// A Python value read as `T`; a value `T` cannot hold is a ConfigError naming `what` and, in
/// a table, the key at fault (`[lsm]: memtable_bytes: OverflowError: can't convert negative
/// int to unsigned`).
pub(crate) fn from_py<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    depythonize(obj).map_err(|e| {
        let why = e.to_string();
        ConfigError::new_err(format!("{what}: {}", key_at_fault::<T>(obj, &why).unwrap_or(why)))
    })
}

/// Why `T` cannot hold the table `obj` (`why`: the error reading all of it), with the key at
/// fault: an integer too large for any key, else the first key that `T` cannot hold alone.
fn key_at_fault<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, why: &str) -> Option<String> {
    fn too_big(obj: &Bound<'_, PyAny>, path: &str) -> Option<String> {
        let d = obj.cast::<PyDict>().ok()?;
        d.iter().find_map(|(k, v)| {
            let key = format!("{path}{}", k.str().ok()?);
            if v.is_instance_of::<PyInt>() && v.extract::<i64>().is_err() {
                return Some(format!("{key}: {v} is out of range"));
            }
            too_big(&v, &format!("{key}."))
        })
    }
    if let Some(m) = too_big(obj, "") {
        return Some(m);
    }
    let d = obj.cast::<PyDict>().ok()?;
    d.iter().find_map(|(k, v)| {
        let alone = PyDict::new(obj.py());
        alone.set_item(&k, &v).ok()?;
        let e = depythonize::<T>(alone.as_any()).err()?;
        (e.to_string() == why).then(|| format!("{k}: {why}"))
    })
}

/// A config tree given from Python (a preset name plus tables, as a dict).
pub(crate) fn tree_from_py(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<toml::Value> {
    let v: toml::Value = from_py(obj, what)?;
    if !v.is_table() {
        return Err(ConfigError::new_err(format!("{what}: expected a table (a dict), got {}", v.type_str())));
    }
    Ok(v)
}

/// A complete, validated config from a dict: keys missing from it come from its preset.
pub(crate) fn config_from_py(obj: &Bound<'_, PyAny>, origin: &str) -> PyResult<Config> {
    Config::from_value(tree_from_py(obj, origin)?, None, origin).map_err(core_err)
}

/// A `[workload]` table given from Python (ssdlab.Workload and ssdlab.Mix send only the keys
/// the user set) as the core runs it on the device configured by `dev`:
/// - keys not given take the core's defaults (`WorkloadConfig::default()`), never the
///   device's own `[workload]` table, so a Workload means the same on every device;
/// - the default stop condition applies only when the table gives none: stop conditions the
///   user gives replace it rather than racing it.
///
/// The table is checked as part of the device's config (`what` names it in errors), so the
/// relations between keys (`stop_sim_ns` needs timing, ...) hold as for a TOML file.
pub(crate) fn workload_from_py(dev: &Config, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<WorkloadConfig> {
    let user = tree_from_py(obj, what)?;
    let user = user.as_table().expect("checked to be a table");
    let mut table = toml::Value::try_from(WorkloadConfig::default()).expect("workload serialises");
    let t = table.as_table_mut().expect("workload is a table");
    ssdlab_core::config::apply_stop_rule(t, user);
    for (k, v) in user {
        t.insert(k.clone(), v.clone());
    }
    let mut base = toml::Value::try_from(dev).expect("config serialises");
    base.as_table_mut().expect("config is a table").insert("workload".into(), table);
    Ok(Config::from_value(base, None, what).map_err(core_err)?.workload)
}
