//! The pages of `gpuvet serve`, server-rendered: pure functions from what the store
//! returns (job, instance and run summaries, reports, events) to whole HTML documents.
//! No I/O and no clock: the server reads, calls one of these, and sends the text.
//!
//! - [`instances_page`]: `/` and `/instances?job=JOB`, every job's instances with
//!   their latest status, problems first and the healthy rest folded;
//! - [`instance_page`]: `/instances/{job}/{node}`, one instance with its report's
//!   findings and check panels, its runs and events, live while it runs;
//! - [`events_page`]: `/events`, the deployment events with a filter form;
//! - [`timeline_page`]: `/jobs/{job}/timeline`, one attempt's timeline on one clock,
//!   a lane per node (a large group folded), with its explanation;
//! - [`nodes_page`]: `/nodes`, the nodes ranked by failed runs in a window, repeat
//!   offenders flagged;
//! - [`node_page`]: `/nodes/{node}`, one node across jobs: its runs, each check's
//!   figures over time as sparklines, its findings and quarantines;
//! - [`error_page`]: what a page request that finds nothing gets.
//!
//! Every link comes from [`href`], which names the routes; every page shares the frame
//! of [`layout`] (the crate's stylesheet, a nav bar); every string from the data goes
//! through [`escape`](crate::escape).

mod error;
mod events;
pub mod href;
mod instance;
mod instances;
pub mod layout;
mod live;
mod nodes;
mod timeline;
mod when;

#[cfg(test)]
mod test_data;

pub use error::error_page;
pub use events::events_page;
pub use instance::instance_page;
pub use instances::{SHOWN_INSTANCES, SHOWN_RANGES, instances_page};
pub use live::POLL_MS;
pub use nodes::{node_page, nodes_page, sparkline};
pub use timeline::{FOLDED_LANES, SHOWN_ENTRIES, SHOWN_LANES, timeline_page};
