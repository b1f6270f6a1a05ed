//! What a host without Landlock signal scoping (ABI < 6) means for a
//! launcher. Without it an agent running as the runner's uid can signal the
//! runner (`kill -STOP` freezes it and every other thread) and reach its
//! abstract unix sockets. An agent of another uid (`--agent-uid`) cannot
//! signal the runner, so `enforce` accepts that; without one it refuses.
//! `best-effort` applies what there is and reports the gap.
//!
//! A pure function of the mode, the probed ABI and the configuration, so it
//! is tested for every ABI on any kernel.

use crate::landlock_rules::ABI_SCOPE;
use crate::mode::Mode;
use crate::policy::AgentUser;

/// What [`signal_scoping`] found wanting.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScopeGap {
    /// Signals are scoped, or the mode is `off`: nothing to say.
    None,
    /// A line for [`crate::LauncherStatus::missing`].
    Note(String),
    /// `enforce` must refuse: the reason, for `LaunchError::Unavailable`.
    Refuse(String),
}

/// Decides for `mode` on a host whose Landlock ABI is `abi` (`None`: no
/// Landlock), with agents run as `agent_user` (`None`: the runner's uid)
/// and scoping asked for (`scope_ipc`).
pub(crate) fn signal_scoping(
    mode: Mode,
    abi: Option<i32>,
    scope_ipc: bool,
    agent_user: Option<AgentUser>,
) -> ScopeGap {
    if mode == Mode::Off || !scope_ipc {
        return ScopeGap::None;
    }
    let lacks = match abi {
        Some(abi) if abi >= ABI_SCOPE => return ScopeGap::None,
        Some(abi) => format!("kernel Landlock ABI {abi} < {ABI_SCOPE}"),
        None => "no Landlock".to_string(),
    };
    match (mode, agent_user) {
        (_, Some(u)) => ScopeGap::Note(format!(
            "landlock scoping of signals and abstract unix sockets: {lacks}; agents run as uid {} \
             and cannot signal the runner, but one thread's processes can signal another's",
            u.uid
        )),
        (Mode::Enforce, None) => ScopeGap::Refuse(format!(
            "{lacks}: agents of the runner's uid could signal it (kill -STOP); \
             run them as another uid with --agent-uid, or use --sandbox best-effort"
        )),
        (_, None) => ScopeGap::Note(format!(
            "landlock scoping of signals and abstract unix sockets: {lacks}; \
             signals are not scoped: agents of the runner's uid can signal it (kill -STOP) \
             and other threads' processes; run them as another uid with --agent-uid"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: AgentUser = AgentUser {
        uid: 1500,
        gid: 1500,
    };

    #[test]
    fn abi_6_and_later_scope_signals_in_every_mode() {
        for abi in [6, 7, 9] {
            for mode in [Mode::Enforce, Mode::BestEffort, Mode::Off] {
                for user in [None, Some(AGENT)] {
                    assert_eq!(
                        signal_scoping(mode, Some(abi), true, user),
                        ScopeGap::None,
                        "{mode} ABI {abi} {user:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn enforce_below_abi_6_refuses_without_an_agent_uid_naming_why() {
        for abi in [Some(1), Some(5), None] {
            let ScopeGap::Refuse(why) = signal_scoping(Mode::Enforce, abi, true, None) else {
                panic!("ABI {abi:?}: not refused");
            };
            assert!(
                why.contains("Landlock") && why.contains("--agent-uid"),
                "{why}"
            );
        }
        let ScopeGap::Refuse(why) = signal_scoping(Mode::Enforce, Some(5), true, None) else {
            unreachable!()
        };
        assert!(why.contains("ABI 5 < 6"), "{why}");
    }

    #[test]
    fn an_agent_uid_makes_abi_5_acceptable_but_still_reported() {
        for mode in [Mode::Enforce, Mode::BestEffort] {
            let ScopeGap::Note(line) = signal_scoping(mode, Some(5), true, Some(AGENT)) else {
                panic!("{mode}: no note");
            };
            assert!(line.starts_with("landlock scoping"), "{line}");
            assert!(line.contains("uid 1500"), "{line}");
        }
    }

    #[test]
    fn best_effort_below_abi_6_reports_signals_not_scoped() {
        let ScopeGap::Note(line) = signal_scoping(Mode::BestEffort, Some(5), true, None) else {
            panic!("no note");
        };
        assert!(line.starts_with("landlock scoping"), "{line}");
        assert!(line.contains("signals are not scoped"), "{line}");
        assert!(line.contains("--agent-uid"), "{line}");
    }

    #[test]
    fn off_and_unasked_scoping_say_nothing() {
        assert_eq!(
            signal_scoping(Mode::Off, Some(5), true, None),
            ScopeGap::None
        );
        assert_eq!(
            signal_scoping(Mode::Enforce, Some(5), false, None),
            ScopeGap::None
        );
    }
}
