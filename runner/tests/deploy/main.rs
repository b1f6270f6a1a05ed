//! Checks of `deploy/` that need no Docker engine and no cluster: the
//! Dockerfile (COPY sources, hardening, tini), the binary run the way the
//! image runs it (only the image's env, uid 10001, read-only root except the
//! two volumes), compose, every Kubernetes manifest (schema-validated offline
//! with `kubernetes-validate`, and cross-checked against the runner), the
//! systemd unit, and PID-1 reaping in a fresh pid namespace. And the real
//! thing (`image.rs`): the image built with podman from the unmodified
//! Dockerfile and run hardened against the mock control plane's image.
//!
//! Checks that need root (namespaces, switching uid) or a tool that may be
//! absent (python3, tini, kubectl, systemd-analyze) print why they were
//! skipped instead of failing.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dockerfile;
mod helm;
mod image;
mod kubernetes;
mod pid1;
mod support;
