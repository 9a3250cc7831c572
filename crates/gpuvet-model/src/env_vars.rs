//! The environment variables that more than one gpuvet program reads, named once:
//! the node binary, the fleet server and the push client agree on them here.

/// The group's shared secret: every node of a group proves it in the handshake.
pub const GROUP_TOKEN: &str = "GPUVET_TOKEN";

/// The token of a fleet server: it requires it on writes, and nodes send it with what
/// they push.
pub const REPORT_TOKEN: &str = "GPUVET_REPORT_TOKEN";

/// The read token of a fleet server: when it was started with one, every read (the
/// API, the pages, `/metrics`) needs it; `gpuvet timeline|explain|bundle --server`
/// send it. Separate from [`REPORT_TOKEN`], which every node holds.
pub const READ_TOKEN: &str = "GPUVET_READ_TOKEN";

/// The CA file a node trusts for an `https://` server, for the commands that take the
/// server from a flag rather than the config; `gpuvet.report_ca` wins where both are.
pub const REPORT_CA: &str = "GPUVET_REPORT_CA";

/// The variables whose values are secrets wherever they appear: no report, bundle or
/// log may hold their values.
pub const SECRET_VARS: [&str; 3] = [GROUP_TOKEN, REPORT_TOKEN, READ_TOKEN];
