//! Baseline figures per GPU model (placeholder until issue 4 lands).
