//! Placeholder until the scripted adapter lands.
