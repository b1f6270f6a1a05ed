//! Resource limits (setrlimit) every agent process starts with.

/// The default `RLIMIT_NOFILE`: open files per process. Enough for a
/// language server watching a large repository or a parallel `npm
/// install`; the kernel's own default soft limit is 1024.
pub const DEFAULT_NOFILE: u64 = 4096;

/// The default `RLIMIT_FSIZE`: 16 GiB, the largest file a process may
/// write. No agent's work (sources, build artifacts, a database dump, an
/// image tarball) needs one file that large; `fallocate -l 40G` or a runaway
/// `yes > f` stops there with `EFBIG` instead of filling the host's disk.
/// It bounds each file, not the sum of them (that is a quota's job).
pub const DEFAULT_FSIZE: u64 = 16 << 30;

/// Per-process limits; `None` keeps the runner's own limit. The core size is
/// always 0 (a core dump would write process memory, secrets included, to
/// disk). The default: [`DEFAULT_NOFILE`], [`DEFAULT_FSIZE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rlimits {
    /// `RLIMIT_NOFILE`: open files.
    pub nofile: Option<u64>,
    /// `RLIMIT_FSIZE`: largest file a process may write, in bytes.
    pub fsize: Option<u64>,
    /// `RLIMIT_NPROC`: processes of the uid. Only applied with an agent uid:
    /// the kernel counts per uid (shared with the runner otherwise) and
    /// ignores it for root.
    pub nproc: Option<u64>,
    /// `RLIMIT_CPU`: CPU seconds per process.
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_AS`: address space in bytes.
    pub address_space: Option<u64>,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            nofile: Some(DEFAULT_NOFILE),
            fsize: Some(DEFAULT_FSIZE),
            nproc: None,
            cpu_seconds: None,
            address_space: None,
        }
    }
}

impl Rlimits {
    /// The (resource, name, value) triples to set, and notes on limits left
    /// out. `agent_uid`: whether processes run as a dedicated agent uid.
    // The RLIMIT_* constants are u32 on glibc and c_int on musl.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn plan(&self, agent_uid: bool) -> (Vec<(u32, &'static str, u64)>, Vec<String>) {
        let mut out = vec![(libc::RLIMIT_CORE as u32, "core", 0)];
        let mut notes = Vec::new();
        if let Some(v) = self.nofile {
            out.push((libc::RLIMIT_NOFILE as u32, "nofile", v));
        }
        if let Some(v) = self.fsize {
            out.push((libc::RLIMIT_FSIZE as u32, "fsize", v));
        }
        if let Some(v) = self.cpu_seconds {
            out.push((libc::RLIMIT_CPU as u32, "cpu", v));
        }
        if let Some(v) = self.address_space {
            out.push((libc::RLIMIT_AS as u32, "as", v));
        }
        if let Some(v) = self.nproc {
            if agent_uid {
                out.push((libc::RLIMIT_NPROC as u32, "nproc", v));
            } else {
                notes.push(
                    "rlimit nproc: not applied without --agent-uid (counted per uid, ignored for root)"
                        .to_string(),
                );
            }
        }
        (out, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_is_always_zero_and_nproc_needs_an_agent_uid() {
        let r = Rlimits {
            nproc: Some(100),
            fsize: Some(1 << 20),
            ..Rlimits::default()
        };
        assert_eq!(Rlimits::default().fsize, Some(DEFAULT_FSIZE));
        let (set, notes) = r.plan(false);
        let names: Vec<_> = set.iter().map(|(_, n, _)| *n).collect();
        assert_eq!(names, vec!["core", "nofile", "fsize"]);
        assert_eq!(notes.len(), 1);
        let (set, notes) = r.plan(true);
        assert!(set.iter().any(|(_, n, v)| *n == "nproc" && *v == 100));
        assert!(notes.is_empty());
    }
}
