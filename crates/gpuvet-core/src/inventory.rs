//! Inventory consistency across nodes (placeholder until issue 4 lands).
