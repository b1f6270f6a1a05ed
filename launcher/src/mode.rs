//! The three sandbox modes an operator chooses from (`--sandbox`).

use std::fmt;
use std::str::FromStr;

/// How strictly the launcher confines a thread's processes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Every isolation the launcher considers essential must be in force
    /// (Landlock, capabilities dropped when root, TCP rules when configured);
    /// otherwise the launch fails with [`crate::LaunchError::Unavailable`].
    Enforce,
    /// Apply whatever the host offers and report what could not be applied.
    #[default]
    BestEffort,
    /// No isolation (no Landlock, capabilities kept, no uid switch). The
    /// environment allowlist, rlimits and process tracking still apply.
    Off,
}

impl Mode {
    /// The flag spelling (`enforce`, `best-effort`, `off`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::BestEffort => "best-effort",
            Mode::Off => "off",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--sandbox` value that is none of the three modes.
#[derive(Debug, thiserror::Error)]
#[error("unknown sandbox mode {0:?} (expected enforce, best-effort or off)")]
pub struct UnknownMode(String);

impl FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enforce" => Ok(Mode::Enforce),
            "best-effort" | "best_effort" => Ok(Mode::BestEffort),
            "off" => Ok(Mode::Off),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_the_three_modes() {
        for m in [Mode::Enforce, Mode::BestEffort, Mode::Off] {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
        }
        assert!("strict".parse::<Mode>().is_err());
        assert_eq!(Mode::default(), Mode::BestEffort);
    }
}
