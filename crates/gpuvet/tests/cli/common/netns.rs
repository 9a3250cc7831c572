//! "Nodes" as network namespaces: each has a control veth on one bridge and a data
//! veth on another (a front-end and a back-end network), so a data link can be slowed
//! or cut while the control plane stays up. Needs root and iproute2; everything is
//! removed on drop.

use std::process::Command;

/// The control network: node `i` is `10.77.0.(i+1)`.
pub fn control_ip(node: u32) -> String {
    format!("10.77.0.{}", node + 1)
}

/// The data network: node `i` is `10.78.0.(i+1)`.
pub fn data_ip(node: u32) -> String {
    format!("10.78.0.{}", node + 1)
}

/// Why netns tests cannot run here, or `None` when they can.
fn unavailable() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (CI runs as root)");
    }
    match Command::new("ip").arg("-V").output() {
        Ok(output) if output.status.success() => None,
        _ => Some("needs iproute2's `ip` (.ci/run installs it)"),
    }
}

#[derive(Debug)]
pub struct Netns {
    prefix: String,
    nodes: u32,
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn in_ns(ns: &str, program: &str, args: &[&str]) {
    let output = Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
        .expect("running ip netns exec");
    assert!(
        output.status.success(),
        "{program} {} in {ns}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Netns {
    /// Creates `nodes` namespaces named after `tag` (a few letters, unique per test).
    /// The tests that call it are ignored by default; run with `--include-ignored`
    /// where they cannot run, they fail here, saying what is missing.
    pub fn create(tag: &str, nodes: u32) -> Netns {
        if let Some(why) = unavailable() {
            panic!("this test {why}");
        }
        let prefix = format!("gv{}{tag}", std::process::id() % 10_000);
        assert!(prefix.len() <= 10, "interface names are at most 15 bytes");
        let netns = Netns { prefix, nodes };
        let (control, data) = (netns.bridge("c"), netns.bridge("d"));
        for bridge in [&control, &data] {
            ip(&["link", "add", bridge, "type", "bridge"]);
            ip(&["link", "set", bridge, "up"]);
        }
        for node in 0..nodes {
            let ns = netns.namespace(node);
            ip(&["netns", "add", &ns]);
            for (kind, bridge, addr) in [
                ("c", &control, control_ip(node)),
                ("d", &data, data_ip(node)),
            ] {
                let host_end = format!("{}{node}{kind}", netns.prefix);
                let inner = format!("{kind}0");
                ip(&[
                    "link", "add", &host_end, "type", "veth", "peer", "name", &inner, "netns", &ns,
                ]);
                ip(&["link", "set", &host_end, "master", bridge, "up"]);
                ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    &inner,
                ]);
                ip(&["-n", &ns, "link", "set", &inner, "up"]);
            }
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        netns
    }

    pub fn namespace(&self, node: u32) -> String {
        format!("{}n{node}", self.prefix)
    }

    fn bridge(&self, kind: &str) -> String {
        format!("{}b{kind}", self.prefix)
    }

    /// Caps `node`'s data-plane egress with a token bucket (`tbf`; `netem` is not in
    /// every kernel).
    pub fn limit_rate(&self, node: u32, rate: &str) {
        in_ns(
            &self.namespace(node),
            "tc",
            &[
                "qdisc", "add", "dev", "d0", "root", "tbf", "rate", rate, "burst", "64kb",
                "latency", "20ms",
            ],
        );
    }

    /// Cuts the data link between two nodes, both ways: each drops what it would send
    /// the other.
    pub fn cut(&self, a: u32, b: u32) {
        for (from, to) in [(a, b), (b, a)] {
            ip(&[
                "-n",
                &self.namespace(from),
                "route",
                "add",
                "blackhole",
                &format!("{}/32", data_ip(to)),
            ]);
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for node in 0..self.nodes {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace(node)])
                .output();
        }
        for kind in ["c", "d"] {
            let _ = Command::new("ip")
                .args(["link", "del", &self.bridge(kind)])
                .output();
        }
    }
}
