//! Node names for people: in natural order (`node-2` before `node-10`), and many names
//! said briefly as number ranges under a common prefix (`node-[0-511,513-1023]`).
//!
//! A name is a prefix and its trailing decimal number. Names that share the prefix and
//! the zero-padding (`node-007` keeps its width; `node-7` has none) are one group;
//! names without a trailing number, or with one too long for `u64`, are their own
//! group and come last.

use std::collections::BTreeMap;

/// `name` as (prefix, its trailing number and that number's digits).
fn split(name: &str) -> (&str, Option<(u64, &str)>) {
    let prefix_len = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (prefix, digits) = name.split_at(prefix_len);
    match digits.parse::<u64>() {
        Ok(number) => (prefix, Some((number, digits))),
        Err(_) => (name, None),
    }
}

/// The sort key of natural order: by prefix, then by number, then by the name itself
/// (so `node-07` and `node-7` keep a fixed order).
pub fn natural_key(name: &str) -> (&str, Option<u64>, &str) {
    let (prefix, number) = split(name);
    (prefix, number.map(|(n, _)| n), name)
}

/// `names` said briefly: `node-[0-3,7], node-9, gateway`, one part per run of
/// numbers or name without one, at most `max_parts` of them; when more would be needed
/// the text ends in `…`. Duplicates count once.
pub fn ranges<'a>(names: impl IntoIterator<Item = &'a str>, max_parts: usize) -> String {
    // (prefix, width of a zero-padded number or 0) -> numbers.
    let mut groups: BTreeMap<(&str, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<&str> = Vec::new();
    for name in names {
        match split(name) {
            (prefix, Some((number, digits))) => {
                let width = if digits.len() > 1 && digits.starts_with('0') {
                    digits.len()
                } else {
                    0
                };
                groups.entry((prefix, width)).or_default().push(number);
            }
            (name, None) => plain.push(name),
        }
    }
    plain.sort_unstable();
    plain.dedup();
    let mut parts_left = max_parts;
    let mut out: Vec<String> = Vec::new();
    for ((prefix, width), mut numbers) in groups {
        if parts_left == 0 {
            out.push("…".to_owned());
            return out.join(", ");
        }
        numbers.sort_unstable();
        numbers.dedup();
        let mut runs = runs(&numbers, width);
        if numbers.len() == 1 {
            out.push(format!("{prefix}{}", runs[0]));
        } else {
            if runs.len() > parts_left {
                // The ellipsis in the brackets says there is more.
                runs.truncate(parts_left);
                runs.push("…".to_owned());
                out.push(format!("{prefix}[{}]", runs.join(",")));
                return out.join(", ");
            }
            out.push(format!("{prefix}[{}]", runs.join(",")));
        }
        parts_left = parts_left.saturating_sub(runs.len());
    }
    for name in plain {
        if parts_left == 0 {
            out.push("…".to_owned());
            break;
        }
        out.push(name.to_owned());
        parts_left -= 1;
    }
    out.join(", ")
}

/// Sorted, distinct numbers as `0-3`, `7`, each padded to `width` digits.
fn runs(numbers: &[u64], width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        let mut end = start;
        while i + 1 < numbers.len() && numbers[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        out.push(if start == end {
            format!("{start:0width$}")
        } else {
            format!("{start:0width$}-{end:0width$}")
        });
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_puts_numbers_in_numeric_order() {
        let mut names = vec!["node-10", "node-2", "gpu-a", "node-1", "node-07", "node-7"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(
            names,
            ["gpu-a", "node-1", "node-2", "node-07", "node-7", "node-10"]
        );
    }

    #[test]
    fn consecutive_numbers_become_ranges_under_their_prefix() {
        let names: Vec<String> = (0..1024)
            .filter(|&i| i != 512)
            .map(|i| format!("node-{i}"))
            .collect();
        assert_eq!(
            ranges(names.iter().map(String::as_str), 8),
            "node-[0-511,513-1023]"
        );
        assert_eq!(ranges(["node-5"], 8), "node-5");
        assert_eq!(ranges(["node-5", "node-5"], 8), "node-5");
        assert_eq!(ranges(["n9", "n1", "n3", "n2"], 8), "n[1-3,9]");
        assert_eq!(ranges([], 8), "");
    }

    #[test]
    fn padding_prefixes_and_names_without_numbers_stay_apart() {
        assert_eq!(
            ranges(
                [
                    "gpu-007", "gpu-008", "gpu-010", "rack2-n1", "rack2-n2", "login", "a"
                ],
                8
            ),
            "gpu-[007-008,010], rack2-n[1-2], a, login"
        );
        // Too long for a number: the name as it is.
        let long = "node-123456789012345678901234567890";
        assert_eq!(ranges([long, "node-1"], 8), format!("node-1, {long}"));
        assert_eq!(natural_key(long), (long, None, long));
    }

    #[test]
    fn the_text_stops_after_max_parts_with_an_ellipsis() {
        let every_other: Vec<String> = (0..1024).step_by(2).map(|i| format!("node-{i}")).collect();
        assert_eq!(
            ranges(every_other.iter().map(String::as_str), 3),
            "node-[0,2,4,…]"
        );
        assert_eq!(ranges(["a1", "a2", "b1", "c", "d"], 2), "a[1-2], b1, …");
        assert_eq!(ranges(["a1", "a3", "a5", "b1"], 2), "a[1,3,…]");
        assert_eq!(ranges(["a1", "a3", "c", "d"], 3), "a[1,3], c, …");
        assert_eq!(ranges(["c", "d"], 2), "c, d");
        assert_eq!(ranges(["c", "d"], 0), "…");
    }
}
