use std::collections::BTreeSet;

use super::*;

/// A hostlist's items: split at the commas outside brackets.
fn items(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    if !list.is_empty() {
        out.push(&list[start..]);
    }
    out
}

/// The names one item stands for, in the order written.
fn expand_item(item: &str) -> Vec<String> {
    expand_hostlist(item).unwrap()
}

fn expand(list: &str) -> Vec<String> {
    expand_hostlist(list).unwrap_or_else(|err| panic!("{err}"))
}

/// Parts of a hostlist: each number or range in a bracket, each name on its own.
fn parts(list: &str) -> usize {
    items(list)
        .iter()
        .map(|item| {
            if item.contains('[') {
                item.matches(',').count() + 1
            } else {
                1
            }
        })
        .sum()
}

/// (the listed part, the count of nodes not listed).
fn listed_and_more(folded: &str) -> (&str, usize) {
    match folded.rsplit_once(" and ") {
        Some((list, more)) => (list, more.strip_suffix(" more").unwrap().parse().unwrap()),
        None => (folded, 0),
    }
}

/// Folds `names` uncut and checks that the text gives back exactly their set.
fn fold(names: &[&str]) -> String {
    let folded = fold_node_names(names, usize::MAX);
    let back: BTreeSet<String> = expand(&folded).into_iter().collect();
    let want: BTreeSet<String> = names.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(back, want, "{folded} does not round-trip");
    folded
}

#[test]
fn names_that_share_a_prefix_fold_into_one_bracket() {
    assert_eq!(
        fold(&["local-0", "local-1", "local-2", "local-3"]),
        "local-[0-3]"
    );
    assert_eq!(
        fold(&["node-0", "node-1", "node-2", "gpu-a"]),
        "gpu-a,node-[0-2]"
    );
    assert_eq!(fold(&["vm#0", "vm#1", "vm#2"]), "vm#[0-2]");
    assert_eq!(fold(&["node-0", "node-1"]), "node-[0-1]");
    assert_eq!(fold(&["a1", "a2", "b3", "b4", "b5"]), "a[1-2],b[3-5]");
    assert_eq!(fold(&["n0", "n1", "n2", "n4", "n5", "n9"]), "n[0-2,4-5,9]");
    let all_but_512: Vec<String> = (0..1024)
        .filter(|&i| i != 512)
        .map(|i| format!("node-{i}"))
        .collect();
    assert_eq!(
        fold_node_names(&all_but_512, usize::MAX),
        "node-[0-511,513-1023]"
    );
    let group: Vec<String> = (0..4096).map(|n| format!("node-{n}")).collect();
    assert_eq!(fold_node_names(&group, MAX_PARTS), "node-[0-4095]");
}

#[test]
fn one_name_per_prefix_and_no_names_need_no_brackets() {
    assert_eq!(fold(&[]), "");
    assert_eq!(fold(&["solo"]), "solo");
    assert_eq!(fold(&["node-5"]), "node-5");
    assert_eq!(
        fold(&["rack2-n1", "rack2-n2", "login", "a"]),
        "a,login,rack2-n[1-2]"
    );
}

#[test]
fn the_order_is_natural_whatever_order_the_names_came_in() {
    assert_eq!(fold(&["n3", "n1", "n2"]), "n[1-3]");
    assert_eq!(fold(&["n10", "n9", "n2"]), "n[2,9-10]");
    assert_eq!(fold(&["n0", "n1", "n2", "x", "n3", "n4", "n5"]), "n[0-5],x");
    assert_eq!(
        fold(&["node-2", "gateway", "gpu-1", "node-1"]),
        "gateway,gpu-1,node-[1-2]"
    );
    // A name without a number sorts where its prefix would.
    assert_eq!(fold(&["node-1", "node-", "node-0"]), "node-,node-[0-1]");
}

#[test]
fn duplicates_count_once() {
    assert_eq!(fold(&["node-5", "node-5"]), "node-5");
    assert_eq!(fold(&["a", "b", "a", "n1", "n2", "n1"]), "a,b,n[1-2]");
    assert_eq!(
        fold_node_names(&["n1", "n1", "n3", "n5", "n5"], 1),
        "n1 and 2 more"
    );
}

#[test]
fn zero_padding_is_kept_as_a_width() {
    assert_eq!(fold(&["n01", "n02", "n03"]), "n[01-03]");
    assert_eq!(fold(&["n00", "n01", "n02"]), "n[00-02]");
    assert_eq!(
        fold(&["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07"]),
        "gpu-[01-04,07]"
    );
    // A number that fills a padded width exactly is one of them.
    assert_eq!(fold(&["n08", "n09", "n10", "n11"]), "n[08-11]");
    assert_eq!(fold(&["n01", "n10"]), "n[01,10]");
    assert_eq!(fold(&["n8", "n9", "n10"]), "n[8-10]");
    assert_eq!(
        fold(&["gpu-007", "gpu-008", "gpu-010"]),
        "gpu-[007-008,010]"
    );
    // Other widths are other names, each range written in its own.
    assert_eq!(fold(&["n9", "n010", "n011", "n012"]), "n[9,010-012]");
    assert_eq!(fold(&["n1", "n02", "n03"]), "n[1,02-03]");
    assert_eq!(fold(&["n098", "n099", "n100", "n0101"]), "n[098-100,0101]");
    assert_eq!(fold(&["n7", "n07"]), "n[07,7]");
    assert_eq!(fold(&["n1", "n2", "n01", "n02"]), "n[01-02,1-2]");
}

#[test]
fn names_that_are_no_hostnames_are_listed_as_they_are() {
    let names = [
        "n18446744073709551614",
        "n18446744073709551615",
        "n18446744073709551616",
        "n99999999999999999999999",
    ];
    assert_eq!(
        fold(&names),
        "n[18446744073709551614-18446744073709551615],n18446744073709551616,\
         n99999999999999999999999"
    );
    // Brackets, commas and spaces are the syntax's own: such names cannot fold.
    assert_eq!(
        fold_node_names(&["y 2", "x[1]", "a,b1", "n2", "n1"], usize::MAX),
        "a,b1,n[1-2],x[1],y 2"
    );
    // A number alone is a name with an empty prefix.
    assert_eq!(fold(&["1", "2", "3"]), "[1-3]");
}

#[test]
fn past_max_parts_the_nodes_not_listed_are_counted() {
    let every_other: Vec<String> = (0..1024).step_by(2).map(|i| format!("node-{i}")).collect();
    assert_eq!(
        fold_node_names(&every_other, 3),
        "node-[0,2,4] and 509 more"
    );
    assert_eq!(
        fold_node_names(&["a1", "a2", "b1", "c", "d"], 2),
        "a[1-2],b1 and 2 more"
    );
    assert_eq!(
        fold_node_names(&["a1", "a3", "a5", "b1"], 2),
        "a[1,3] and 2 more"
    );
    assert_eq!(
        fold_node_names(&["a1", "a3", "c", "d"], 3),
        "a[1,3],c and 1 more"
    );
    assert_eq!(fold_node_names(&["c", "d"], 2), "c,d");
    // At least one part is listed.
    assert_eq!(fold_node_names(&["c", "d"], 0), "c and 1 more");
    // A range counts as one part, however many nodes it holds.
    assert_eq!(
        fold_node_names(&["n0", "n1", "n2", "n3", "x"], 1),
        "n[0-3] and 1 more"
    );
    let eight = ["a", "b", "c", "d", "e", "f", "g", "h"];
    assert_eq!(fold_node_names(&eight, MAX_PARTS), eight.join(","));
    let nine = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    assert_eq!(
        fold_node_names(&nine, MAX_PARTS),
        "a,b,c,d,e,f,g,h and 1 more"
    );
}

#[test]
fn natural_order_puts_numbers_in_numeric_order() {
    let mut names = vec!["node-10", "node-2", "gpu-a", "node-1", "node-07", "node-7"];
    names.sort_by_key(|n| natural_key(n));
    assert_eq!(
        names,
        ["gpu-a", "node-1", "node-2", "node-07", "node-7", "node-10"]
    );
    let long = "node-123456789012345678901234567890";
    assert_eq!(natural_key(long), (long, None, long));
    assert_eq!(natural_key("node-12"), ("node-", Some(12), "node-12"));
}

/// splitmix64: reproducible cases without a dependency.
struct Cases(u64);

impl Cases {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A few dozen names: runs under a few prefixes, zero-padded or not, and some
    /// without a number.
    fn names(&mut self) -> Vec<String> {
        const PREFIXES: [&str; 5] = ["node-", "gpu", "n", "rack1-n", ""];
        const BARE: [&str; 4] = ["login", "gateway-a", "node-", "x"];
        (0..self.below(40))
            .map(|_| {
                if self.below(8) == 0 {
                    return BARE[self.below(4) as usize].to_owned();
                }
                let prefix = PREFIXES[self.below(5) as usize];
                let number = self.below(130);
                let width = [0, 2, 3][self.below(3) as usize];
                format!("{prefix}{number:0width$}")
            })
            .collect()
    }
}

#[test]
fn folding_then_expanding_gives_the_same_set_and_cuts_count_the_rest() {
    let mut cases = Cases(7);
    for _ in 0..3000 {
        let names = cases.names();
        let set: BTreeSet<String> = names.iter().cloned().collect();
        let whole = fold_node_names(&names, usize::MAX);
        let expanded = expand(&whole);
        assert_eq!(expanded.len(), set.len(), "{whole}: a name twice");
        assert_eq!(
            expanded.iter().cloned().collect::<BTreeSet<_>>(),
            set,
            "{names:?} → {whole}"
        );
        // Each item starts where its first name sorts.
        let firsts: Vec<String> = items(&whole)
            .into_iter()
            .map(|i| expand_item(i)[0].clone())
            .collect();
        assert!(
            firsts
                .windows(2)
                .all(|w| natural_key(&w[0]) < natural_key(&w[1])),
            "{whole}"
        );

        let max = 1 + cases.below(6) as usize;
        let cut = fold_node_names(&names, max);
        let (listed_text, more) = listed_and_more(&cut);
        let listed: Vec<String> = expand(listed_text);
        assert!(listed.iter().all(|n| set.contains(n)), "{cut}");
        assert_eq!(listed.len() + more, set.len(), "{cut}");
        assert!(parts(listed_text) <= max, "{cut}: more than {max} parts");
    }
}

#[test]
fn a_hostlist_expands_in_the_order_written_with_duplicates_kept() {
    assert_eq!(
        expand("gpu-[01-04,07],login,n[8-10]"),
        [
            "gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-07", "login", "n8", "n9", "n10"
        ]
    );
    assert_eq!(expand("n[3,1],n1,n[1]"), ["n3", "n1", "n1", "n1"]);
    // The width is the first number's, as Slurm reads it.
    assert_eq!(expand("n[8-010]"), ["n8", "n9", "n10"]);
    assert_eq!(expand("n[008-10]"), ["n008", "n009", "n010"]);
    assert_eq!(expand("n[7,07]"), ["n7", "n07"]);
    // Several brackets: every combination, the last counting fastest.
    assert_eq!(
        expand("rack[1-2]-n[3-4]"),
        ["rack1-n3", "rack1-n4", "rack2-n3", "rack2-n4"]
    );
    assert_eq!(expand("x[0-1][2-3]"), ["x02", "x03", "x12", "x13"]);
    assert_eq!(expand("[1-2]"), ["1", "2"]);
    // Empty items are skipped; an empty list has no names.
    assert_eq!(expand("a,,b,"), ["a", "b"]);
    assert!(expand("").is_empty());
    let top = u64::MAX.to_string();
    assert_eq!(expand(&format!("n[{top}]")), [format!("n{top}")]);
}

#[test]
fn what_is_no_hostlist_is_refused_with_the_reason() {
    let reason = |list: &str| expand_hostlist(list).unwrap_err().reason;
    assert_eq!(reason("n[3-1]"), "the range `3-1` runs backwards");
    assert_eq!(
        reason("n[]"),
        "`[]` holds ``, not a number or a range of numbers"
    );
    assert_eq!(
        reason("n[1,,2]"),
        "`[1,,2]` holds ``, not a number or a range of numbers"
    );
    assert_eq!(
        reason("n[a-b]"),
        "`[a-b]` holds `a-b`, not a number or a range of numbers"
    );
    assert_eq!(
        reason("n[+1]"),
        "`[+1]` holds `+1`, not a number or a range of numbers"
    );
    assert_eq!(
        reason("n[99999999999999999999]"),
        "`[99999999999999999999]` holds `99999999999999999999`, not a number or a range of numbers"
    );
    assert_eq!(
        reason("n[1-2]x"),
        "text `x` after the brackets of `n[1-2]x`"
    );
    assert_eq!(reason("n[1-2"), "a `[` without its `]`");
    assert_eq!(reason("n1]"), "a `]` without its `[` at byte 2");
    assert_eq!(reason("n[1[2]]"), "a `[` inside brackets");
    assert_eq!(reason("a b"), "whitespace at byte 1");
    let err = expand_hostlist("n[0-99999999]").unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("`n[0-99999999]` is not a hostlist: it names more than `{MAX_EXPANDED}` nodes")
    );
    // The cap holds across ranges, brackets and items too.
    assert!(expand_hostlist("n[0-40000,0-40000]").is_err());
    assert!(expand_hostlist("n[0-999][0-999]").is_err());
    assert!(expand_hostlist("a[0-40000],b[0-40000]").is_err());
    assert_eq!(expand(&format!("n[1-{MAX_EXPANDED}]")).len(), MAX_EXPANDED);
}

/// The names of a fold come back once each, and folding them again writes the same
/// list: the parser reads what the fold means, no more and no less.
#[test]
fn expanding_a_fold_gives_each_name_back_once_and_folds_the_same_again() {
    let mut cases = Cases(34);
    for _ in 0..3000 {
        let names = cases.names();
        let want: BTreeSet<String> = names.iter().cloned().collect();
        let folded = fold_node_names(&names, usize::MAX);
        let back = expand(&folded);
        assert_eq!(back.len(), want.len(), "{folded}: a name twice");
        assert_eq!(
            back.iter().cloned().collect::<BTreeSet<_>>(),
            want,
            "{folded}"
        );
        assert_eq!(fold_node_names(&back, usize::MAX), folded, "{back:?}");
    }
}
