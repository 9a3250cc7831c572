//! `Config::from_json` on arbitrary text: never panics, and text over the size bound is
//! refused without being parsed.

#![no_main]

use gpuvet_model::config::{Config, MAX_CONFIG_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let result = Config::from_json(text);
    if text.len() > MAX_CONFIG_BYTES {
        assert!(result.is_err());
    }
});
