//! The NCCL RAS status parser: never panics, and what it accepts stays within the
//! value bound.

#![no_main]

use gpuvet_watch::ras::{MAX_STATUS_VALUES, parse_status};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(status) = parse_status(text, "fuzz") {
        let ranks: usize = status
            .communicators
            .iter()
            .map(|c| 1 + c.ranks.len() + c.missing_ranks.len())
            .sum();
        assert!(ranks <= MAX_STATUS_VALUES);
    }
});
