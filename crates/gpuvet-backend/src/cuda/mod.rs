//! The cuda backend (placeholder until issue 4 lands).
