//! Flight-recorder dumps, pickle and JSON (the first byte picks, as in `parse_dump`):
//! never panics, and the pickle decoder never builds more than its bounds allow.

#![no_main]

use std::path::Path;

use gpuvet_model::bounds::json_values_at_most;
use gpuvet_watch::flight_recorder::{PickleError, PickleLimits, parse_dump, pickle_to_json};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Small bounds, so the fuzzer reaches them.
const LIMITS: PickleLimits = PickleLimits {
    values: 4096,
    text_bytes: 64 << 10,
};

/// Values (and keys) and bytes of text in a decoded value.
fn size(value: &Value) -> (usize, usize) {
    match value {
        Value::String(text) => (1, text.len()),
        Value::Array(items) => items.iter().map(size).fold((1, 0), add),
        Value::Object(map) => map
            .iter()
            .map(|(key, item)| add((1, key.len()), size(item)))
            .fold((1, 0), add),
        _ => (1, 0),
    }
}

fn add(a: (usize, usize), b: (usize, usize)) -> (usize, usize) {
    (a.0 + b.0, a.1 + b.1)
}

fuzz_target!(|data: &[u8]| {
    let _ = parse_dump(data, Path::new("fuzz"), None);
    match pickle_to_json(data, LIMITS) {
        Ok(value) => {
            let (values, text) = size(&value);
            // Non-string keys are counted as their text as well as their values.
            assert!(values <= 2 * LIMITS.values, "{values} values");
            assert!(text <= LIMITS.text_bytes, "{text} bytes of text");
        }
        Err(PickleError::TooLarge { .. } | PickleError::Invalid { .. }) => {}
    }
    if let (Ok(counted), Ok(value)) = (
        json_values_at_most(data, LIMITS.values),
        serde_json::from_slice::<Value>(data),
    ) {
        let (values, _) = size(&value);
        assert!(
            values <= counted,
            "{values} values built, {counted} counted"
        );
    }
});
