//! Groups of `gpuvet` agents in network namespaces, one namespace a node, with links
//! shaped by `tc`. A test binary of its own, apart from `tests/cli`: these tests judge
//! bandwidth between the namespaces, and cargo runs test binaries one after another,
//! so no other test of the suite competes with them for the CPU. (Merged into `cli`,
//! the rate-limited link's test failed once in a CI run; nextest gets the same
//! isolation from `.config/nextest.toml`.)

// Shared with `tests/cli` (it allows the helpers a binary leaves unused).
#[path = "../cli/common/mod.rs"]
mod common;

mod netns;
