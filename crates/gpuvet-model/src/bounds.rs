//! Bounds for parsers of outside input: how many JSON values a text can hold, counted
//! before a decoder builds them.
//!
//! serde_json builds what a text says: `[0,0,0,...]` costs two bytes a value in the
//! text and 32 or more in memory, and `[{"a":0},...]` eight bytes an object and a
//! B-tree node (about 600 bytes) each, so a file that passes a byte limit can still
//! take gigabytes to decode. Counting first is one quick pass and allocates nothing.

/// What an object counts for, in values: a decoded object costs a B-tree node of
/// about 600 bytes even with one key, some eight times a decoded scalar or array.
pub const OBJECT_WEIGHT: usize = 8;

/// An upper bound on the values (and object keys) in a JSON text, objects weighted,
/// stopping as soon as it passes `limit`: `Ok(count)` when at most `limit`, else
/// `Err(limit + 1)`.
///
/// Every string, number, literal and array counts one, an object [`OBJECT_WEIGHT`];
/// an object's keys count as strings. No byte counts for more than an object, so a
/// text of `n` bytes counts at most `n × OBJECT_WEIGHT`: a caller may skip texts too
/// short to pass its limit. Invalid JSON is counted the same way (the decoder then refuses it), so
/// the count is an upper bound for any text a JSON decoder accepts.
pub fn json_values_at_most(text: &[u8], limit: usize) -> Result<usize, usize> {
    let mut count = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_token = false;
    for &byte in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        let weight = match byte {
            b'"' => {
                in_string = true;
                in_token = false;
                1
            }
            b'[' => {
                in_token = false;
                1
            }
            b'{' => {
                in_token = false;
                OBJECT_WEIGHT
            }
            b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' => {
                let starts = !in_token;
                in_token = true;
                usize::from(starts)
            }
            _ => {
                in_token = false;
                0
            }
        };
        count += weight;
        if count > limit {
            return Err(limit.saturating_add(1));
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_text_counts_more_than_an_object_a_byte() {
        for text in [
            "{{{{{{{{",
            "{}{}{}",
            "[{},{},{}]",
            r#"{"a":{"b":{}}}"#,
            "[0,0,0,0]",
            r#""""""""#,
            "a b c d",
            "",
        ] {
            let count = json_values_at_most(text.as_bytes(), usize::MAX - 1).unwrap();
            assert!(count <= text.len() * OBJECT_WEIGHT, "{text}: {count}");
        }
    }

    #[test]
    fn counts_values_keys_and_containers() {
        let text = br#"{"a": [1, -2.5e3, true, null], "b\"c": {"d": "e,f[{"}}"#;
        // object, "a", array, 4 scalars, "b\"c", object, "d", "e,f[{"
        assert_eq!(json_values_at_most(text, 100), Ok(9 + 2 * OBJECT_WEIGHT));
        assert_eq!(json_values_at_most(b"[{}]", 100), Ok(1 + OBJECT_WEIGHT));
        assert_eq!(json_values_at_most(b"", 0), Ok(0));
        assert_eq!(json_values_at_most(b"  7 ", 1), Ok(1));
    }

    #[test]
    fn just_under_passes_and_just_over_fails() {
        let mut text = String::from("[");
        text.push_str(&vec!["0"; 999].join(","));
        text.push(']');
        assert_eq!(json_values_at_most(text.as_bytes(), 1000), Ok(1000));
        assert_eq!(json_values_at_most(text.as_bytes(), 999), Err(1000));
    }

    #[test]
    fn is_an_upper_bound_for_what_serde_json_builds() {
        fn built(value: &serde_json::Value) -> usize {
            1 + match value {
                serde_json::Value::Array(items) => items.iter().map(built).sum(),
                serde_json::Value::Object(map) => map.values().map(|v| 1 + built(v)).sum(),
                _ => 0,
            }
        }
        for text in [
            r#"{"k": [{"x": 1}, [], {}, "s", 1e-7, false]}"#,
            r#"[[[["deep"]]], {"a": {"b": {"c": null}}}]"#,
            "\"\\\\\"",
        ] {
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            let counted = json_values_at_most(text.as_bytes(), usize::MAX - 1).unwrap();
            assert!(counted >= built(&value), "{text}: {counted}");
        }
    }
}
