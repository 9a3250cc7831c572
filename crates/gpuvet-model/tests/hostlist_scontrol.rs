//! `node_list::expand_hostlist` against Slurm's own reading: `scontrol show hostnames`
//! (Debian's `slurm-client`) on generated hostlists, folds of generated names among
//! them, must print the same names in the same order; and lists Slurm refuses, gpuvet
//! refuses too. `scontrol` parses the list without a cluster but needs a config to
//! start, so the test writes a minimal `slurm.conf` and points `SLURM_CONF` at it.

use std::path::Path;
use std::process::Command;

use gpuvet_model::node_list::{expand_hostlist, fold_node_names};

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

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }

    /// A number as Slurm may write it: plain or zero-padded.
    fn number(&mut self, below: u64) -> (u64, String) {
        let number = self.below(below);
        let width = [0, 2, 3, 4][self.below(4) as usize];
        (number, format!("{number:0width$}"))
    }

    /// A bracket of numbers and ranges in any order, duplicates and overlaps allowed.
    fn bracket(&mut self) -> String {
        let ranges: Vec<String> = (0..1 + self.below(4))
            .map(|_| {
                let (first, text) = self.number(200);
                if self.below(2) == 0 {
                    return text;
                }
                let last = first + self.below(12);
                let last_width = [0, 2, 3][self.below(3) as usize];
                format!("{text}-{last:0last_width$}")
            })
            .collect();
        format!("[{}]", ranges.join(","))
    }

    /// A hostlist as a person or Slurm may write it: names, brackets, two brackets.
    fn hostlist(&mut self) -> String {
        const PREFIXES: [&str; 6] = ["node-", "gpu", "n", "rack1-n", "a.b-", ""];
        let items: Vec<String> = (0..1 + self.below(4))
            .map(|_| {
                let prefix = self.pick(&PREFIXES);
                match self.below(5) {
                    0 => format!("{prefix}{}", self.number(1000).1),
                    1 => format!("{}-x", self.pick(&["login", "gateway"])),
                    2 => format!("{prefix}{}-s{}", self.bracket(), self.bracket()),
                    _ => format!("{prefix}{}", self.bracket()),
                }
            })
            .collect();
        items.join(",")
    }

    /// Names as gpuvet's groups have them, for `fold_node_names`.
    fn names(&mut self) -> Vec<String> {
        const PREFIXES: [&str; 4] = ["node-", "gpu", "n", "rack1-n"];
        (0..1 + self.below(40))
            .map(|_| {
                let prefix = self.pick(&PREFIXES);
                format!("{prefix}{}", self.number(300).1)
            })
            .collect()
    }
}

/// Slurm's reading of `list`: its names, or `None` when it refuses the list (22.05
/// says "Invalid hostlist" and still exits 0).
fn scontrol_hostnames(conf: &Path, list: &str) -> Option<Vec<String>> {
    let output = Command::new("scontrol")
        .args(["show", "hostnames", list])
        .env("SLURM_CONF", conf)
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run `scontrol` ({err}); install Debian's `slurm-client` \
                 (`apt-get install -y slurm-client`)"
            )
        });
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || stdout.contains("Invalid hostlist") || !stderr.is_empty() {
        return None;
    }
    Some(stdout.lines().map(str::to_owned).collect())
}

fn minimal_conf(dir: &Path) -> std::path::PathBuf {
    let conf = dir.join("slurm.conf");
    std::fs::write(&conf, "ClusterName=gpuvet-test\nSlurmctldHost=localhost\n").unwrap();
    conf
}

#[test]
#[ignore = "needs scontrol (slurm-client)"]
fn expand_hostlist_reads_lists_as_scontrol_does() {
    let dir = tempfile::tempdir().unwrap();
    let conf = minimal_conf(dir.path());
    let mut cases = Cases(34);
    let mut lists: Vec<String> = vec![
        "gpu-[01-04,07]".into(),
        "n[8-010],n[008-10],n[1-02],n[000-2]".into(),
        "n[3,1],n1,n[1,1]".into(),
        "x[0-1][2-3],[1-2]".into(),
        "a,,b".into(),
        format!("n[{}]", u64::MAX),
        "n[1-65536]".into(),
    ];
    lists.extend((0..600).map(|_| cases.hostlist()));
    lists.extend((0..300).map(|_| fold_node_names(&cases.names(), usize::MAX)));
    for list in &lists {
        let slurm = scontrol_hostnames(&conf, list)
            .unwrap_or_else(|| panic!("scontrol refuses `{list}`, which the test made valid"));
        let ours = expand_hostlist(list).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(ours, slurm, "`{list}`");
    }
}

#[test]
#[ignore = "needs scontrol (slurm-client)"]
fn lists_scontrol_refuses_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let conf = minimal_conf(dir.path());
    for list in [
        "n[3-1]",
        "n[]",
        "n[1,,2]",
        "n[a-b]",
        "n[1-2]x",
        "n[-1]",
        "n[0-65536]",
    ] {
        assert_eq!(
            scontrol_hostnames(&conf, list),
            None,
            "scontrol reads `{list}`"
        );
        assert!(expand_hostlist(list).is_err(), "gpuvet reads `{list}`");
    }
}
