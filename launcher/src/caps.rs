//! The capability sets of a process, read from `/proc/<pid>/status`: the
//! probe uses them to decide whether agent processes must shed capabilities,
//! and tests use them to check that they did.

use std::path::Path;

/// `CAP_SETGID`.
pub(crate) const CAP_SETGID: u32 = 6;
/// `CAP_SETUID`.
pub(crate) const CAP_SETUID: u32 = 7;
/// `CAP_SETPCAP`.
pub(crate) const CAP_SETPCAP: u32 = 8;

/// The five capability sets of a process, as bit masks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSets {
    /// `CapInh`.
    pub inheritable: u64,
    /// `CapPrm`.
    pub permitted: u64,
    /// `CapEff`.
    pub effective: u64,
    /// `CapBnd`.
    pub bounding: u64,
    /// `CapAmb`.
    pub ambient: u64,
}

impl CapSets {
    /// The sets of the calling process.
    pub fn current() -> std::io::Result<Self> {
        Self::of_status_file(Path::new("/proc/self/status"))
    }

    /// The sets of process `pid`.
    pub fn of_pid(pid: u32) -> std::io::Result<Self> {
        Self::of_status_file(&Path::new("/proc").join(pid.to_string()).join("status"))
    }

    fn of_status_file(path: &Path) -> std::io::Result<Self> {
        Ok(Self::parse(&std::fs::read_to_string(path)?))
    }

    /// Parses the `Cap*` lines of a `/proc/<pid>/status` text; missing
    /// lines count as empty sets.
    pub fn parse(status: &str) -> Self {
        let mut sets = CapSets::default();
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let Ok(mask) = u64::from_str_radix(value.trim(), 16) else {
                continue;
            };
            match key {
                "CapInh" => sets.inheritable = mask,
                "CapPrm" => sets.permitted = mask,
                "CapEff" => sets.effective = mask,
                "CapBnd" => sets.bounding = mask,
                "CapAmb" => sets.ambient = mask,
                _ => {}
            }
        }
        sets
    }

    /// True when no set holds any capability (bounding included).
    pub fn is_empty(&self) -> bool {
        self.inheritable == 0
            && self.permitted == 0
            && self.effective == 0
            && self.bounding == 0
            && self.ambient == 0
    }

    /// True when `cap` is in the effective set.
    pub fn has_effective(&self, cap: u32) -> bool {
        cap < 64 && self.effective & (1u64 << cap) != 0
    }
}

/// The highest capability number the kernel knows.
pub(crate) fn cap_last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_lines() {
        let s = "Name:\tsh\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n";
        let c = CapSets::parse(s);
        assert_eq!(c.permitted, 0x1ff_ffff_ffff);
        assert!(c.has_effective(CAP_SETPCAP));
        assert!(!c.is_empty());
        assert!(CapSets::parse("CapBnd:\t0\n").is_empty());
    }
}
