//! Progress bars and Ctrl-C while a run has released the GIL, and how runs come back.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use pyo3::prelude::*;

use ssdlab_core::driver::Ending;
use ssdlab_core::RunReport;

use crate::convert::to_py;

/// What a progress callback was last told: it hears again on a new phase or a thousandth more.
#[derive(Default)]
pub(crate) struct Told(Option<(String, f64)>);

impl Told {
    /// Whether `frac` of `phase` is news (and remember it as told if so).
    pub(crate) fn news(&mut self, phase: &str, frac: f64) -> bool {
        let due = match &self.0 {
            Some((p, f)) => p != phase || frac - f >= 1e-3,
            None => true,
        };
        if due {
            self.0 = Some((phase.to_string(), frac));
        }
        due
    }
}

/// Progress reporting and Ctrl-C for one run (or precondition).
pub(crate) struct Watch {
    bar: Option<ProgressBar>,
    phase: String,
    /// A Python callable given (phase, fraction) as the run advances, at most once per
    /// thousandth of a phase; if it raises, the run stops as if interrupted.
    on_progress: Option<Py<PyAny>>,
    /// Whether `on_progress` takes the fraction alone (runs of one phase: the cache,
    /// flashblox, the LSM store).
    fraction_only: bool,
    told: Told,
}

impl Watch {
    pub(crate) fn new(show: bool) -> Watch {
        Watch::with_callback(show, None)
    }

    pub(crate) fn with_callback(show: bool, on_progress: Option<Py<PyAny>>) -> Watch {
        Watch {
            bar: if show { Some(ProgressBar::hidden()) } else { None },
            phase: String::new(),
            on_progress,
            fraction_only: false,
            told: Told::default(),
        }
    }

    /// For a run of one phase: `on_progress(fraction)`. Its `stop` callback is
    /// `|f| watch.tick(phase, f)`.
    pub(crate) fn fractions(show: bool, on_progress: Option<Py<PyAny>>) -> Watch {
        Watch { fraction_only: true, ..Watch::with_callback(show, on_progress) }
    }

    /// The core's progress callback: shows `frac` of `phase`; false stops the run.
    pub(crate) fn tick(&mut self, phase: &str, frac: f64) -> bool {
        if let Some(bar) = &self.bar {
            if phase != self.phase {
                bar.finish_and_clear();
                let b = ProgressBar::new(1000);
                b.set_style(
                    ProgressStyle::with_template("{prefix:>12} [{bar:40}] {percent:>3}% {elapsed_precise} eta {eta}")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                b.set_prefix(phase.to_string());
                b.enable_steady_tick(Duration::from_millis(250));
                self.bar = Some(b);
                self.phase = phase.to_string();
            }
            if let Some(b) = &self.bar {
                b.set_position((frac * 1000.0) as u64);
            }
        }
        // A pending Ctrl-C (Python's handler only sets a flag while we run) stops the run.
        Python::attach(|py| {
            py.check_signals()?;
            if let Some(cb) = &self.on_progress {
                if self.told.news(phase, frac) {
                    if self.fraction_only {
                        cb.call1(py, (frac,))?;
                    } else {
                        cb.call1(py, (phase, frac))?;
                    }
                }
            }
            Ok::<(), PyErr>(())
        })
        .is_ok()
    }

    pub(crate) fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A run as Python gets it: (metrics dict, time-series CSV text, interrupted).
pub(crate) type RunOut<'py> = (Bound<'py, PyAny>, String, bool);

pub(crate) fn run_out(py: Python<'_>, rep: RunReport) -> PyResult<RunOut<'_>> {
    Ok((to_py(py, &rep.metrics)?, rep.series_csv, rep.ending == Ending::Interrupted))
}
