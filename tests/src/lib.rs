//! Placeholder until the mock control plane lands.
