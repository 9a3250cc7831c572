//! What a process spent before its measurements could run — the probe, each device's
//! context, the launch kernel's NVRTC compile — reported once each, on the first
//! measurement that waited for it ([`crate::setup_extra`]).
//!
//! A run's checks share one worker process, so the first check to need a cost pays it
//! and later measurements report 0: a figure per check that sums to the process's.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{Sample, setup_extra};

#[derive(Debug)]
pub(crate) struct SetupCost {
    /// How long [`super::probe`] took: driver init, NVML, the libraries' loading.
    pub(crate) probe_ms: f64,
    probe_reported: AtomicBool,
    /// How long each device's context took to create, once it was.
    context_ms: Vec<OnceLock<f64>>,
    context_reported: Vec<AtomicBool>,
    nvrtc_reported: AtomicBool,
}

/// True the first time it is asked for `reported`, false after.
fn first(reported: &AtomicBool) -> bool {
    !reported.swap(true, Ordering::Relaxed)
}

impl SetupCost {
    pub(crate) fn new(devices: usize) -> Self {
        SetupCost {
            probe_ms: 0.0,
            probe_reported: AtomicBool::new(false),
            context_ms: (0..devices).map(|_| OnceLock::new()).collect(),
            context_reported: (0..devices).map(|_| AtomicBool::new(false)).collect(),
            nvrtc_reported: AtomicBool::new(false),
        }
    }

    /// Records that `device`'s context took `ms` to create (the first record counts).
    pub(crate) fn context_created(&self, device: u32, ms: f64) {
        if let Some(slot) = self.context_ms.get(device as usize) {
            let _ = slot.set(ms);
        }
    }

    /// Adds to `sample` the probe and the slowest context of `devices` that no earlier
    /// measurement reported (0 when all were).
    pub(crate) fn add_to(&self, devices: &[u32], sample: &mut Sample) {
        let context_ms = devices
            .iter()
            .filter_map(|&d| {
                let created = self.context_ms.get(d as usize)?.get().copied()?;
                first(self.context_reported.get(d as usize)?).then_some(created)
            })
            .fold(0.0, f64::max);
        let probe_ms = if first(&self.probe_reported) {
            self.probe_ms
        } else {
            0.0
        };
        sample
            .extra
            .insert(setup_extra::PROBE_MS.to_owned(), probe_ms);
        sample
            .extra
            .insert(setup_extra::CONTEXT_MS.to_owned(), context_ms);
    }

    /// Adds the launch kernel's compile time, `compiled_ms` when this process compiled
    /// it, the first time; 0 after.
    pub(crate) fn add_nvrtc(&self, compiled_ms: Option<f64>, sample: &mut Sample) {
        if let Some(ms) = compiled_ms {
            let ms = if first(&self.nvrtc_reported) { ms } else { 0.0 };
            sample.extra.insert(setup_extra::NVRTC_MS.to_owned(), ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extra(sample: &Sample, key: &str) -> Option<f64> {
        sample.extra.get(key).copied()
    }

    #[test]
    fn each_cost_is_reported_by_the_first_measurement_that_waited_for_it() {
        let mut setup = SetupCost::new(2);
        setup.probe_ms = 200.0;
        setup.context_created(0, 100.0);

        // The first check's sample on device 0 pays the probe and device 0's context.
        let mut first_check = Sample::default();
        setup.add_to(&[0], &mut first_check);
        assert_eq!(extra(&first_check, setup_extra::PROBE_MS), Some(200.0));
        assert_eq!(extra(&first_check, setup_extra::CONTEXT_MS), Some(100.0));

        // A later check in the same process on device 0 paid nothing.
        let mut later = Sample::default();
        setup.add_to(&[0], &mut later);
        assert_eq!(extra(&later, setup_extra::PROBE_MS), Some(0.0));
        assert_eq!(extra(&later, setup_extra::CONTEXT_MS), Some(0.0));

        // Device 1's context, created later, is paid by its first sample; a second
        // record of it does not count.
        setup.context_created(1, 130.0);
        setup.context_created(1, 999.0);
        let mut both = Sample::default();
        setup.add_to(&[0, 1], &mut both);
        assert_eq!(extra(&both, setup_extra::CONTEXT_MS), Some(130.0));
        // An index beyond the devices is ignored, not a panic.
        setup.context_created(7, 1.0);
        setup.add_to(&[7], &mut Sample::default());
    }

    #[test]
    fn the_nvrtc_compile_is_reported_once_and_only_when_it_happened() {
        let setup = SetupCost::new(1);
        let mut none = Sample::default();
        setup.add_nvrtc(None, &mut none);
        assert_eq!(extra(&none, setup_extra::NVRTC_MS), None);
        let mut first = Sample::default();
        setup.add_nvrtc(Some(30.0), &mut first);
        assert_eq!(extra(&first, setup_extra::NVRTC_MS), Some(30.0));
        let mut again = Sample::default();
        setup.add_nvrtc(Some(30.0), &mut again);
        assert_eq!(extra(&again, setup_extra::NVRTC_MS), Some(0.0));
    }
}
