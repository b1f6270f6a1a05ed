//! Tools the model can call, confined to the session workspace.
