//! gpuvet's after-the-fact analysis, as pure functions of the typed record of an
//! attempt ([`gpuvet_model::record::JobRecord`]):
//!
//! - [`timeline`]: every node's checks, incidents, findings and events on the
//!   coordinator's clock, the first error marked and its consequences;
//! - [`explain`]: the first error's lane, the team to hand it to, the next step, and a
//!   conclusion for each hypothesis;
//! - [`drill`]: the fault drills' scenarios and the proof that each expectation held;
//! - [`render`]: a report as the terminal table, and as JUnit XML.
//!
//! The facts arrive typed (incident kinds, entities, runtime findings are enums and
//! structs of `gpuvet-model`), so the analysis matches on them and never parses the
//! words a report shows. It needs only the model, so the server and the bundle use it
//! without linking any backend.

pub mod diagnose;
pub mod drill;
pub mod explain;
pub mod fold;
pub mod render;
pub mod timeline;
