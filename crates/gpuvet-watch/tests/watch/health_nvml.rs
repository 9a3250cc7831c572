//! The NVML source where there is no driver (CI, this machine): a clear error, not a
//! panic. On a GPU machine the same test checks that a poll yields the inventory and
//! one sample per GPU.

use std::time::Duration;

use gpuvet_watch::health::{
    HealthError, HealthReading, HealthSource, NvmlOptions, NvmlSource, Watchdog,
};

#[test]
fn nvml_without_a_driver_is_a_clear_error() {
    match NvmlSource::new(NvmlOptions::default()) {
        Err(e @ HealthError::NvmlInit(_)) => {
            let msg = e.to_string();
            assert!(msg.contains("cannot initialize NVML"), "{msg}");
            assert!(std::error::Error::source(&e).is_some());
        }
        Err(e) => panic!("unexpected error kind: {e}"),
        Ok(source) => {
            // A GPU machine: the source works behind the watchdog.
            let n = source.gpus().len();
            let mut dog = Watchdog::new(source, Duration::from_secs(30)).unwrap();
            let readings = dog.poll(1).unwrap();
            assert!(
                matches!(readings.first(), Some(HealthReading::Inventory { gpus }) if gpus.len() == n)
            );
            let samples = readings
                .iter()
                .filter(|r| matches!(r, HealthReading::Gpu(_)))
                .count();
            assert_eq!(samples, n, "{readings:#?}");
            assert!(dog.poll(2).is_ok());
        }
    }
}
