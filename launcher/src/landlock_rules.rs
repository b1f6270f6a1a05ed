//! Builds a thread's Landlock ruleset in the parent: which paths are
//! read-write, which read-only, which TCP ports are allowed, which scopes are
//! closed. The result is a ruleset file descriptor that each child applies to
//! itself right before exec (see child_setup).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

use crate::error::LaunchError;
use crate::policy::NetRules;

/// First ABI with TCP bind/connect rules.
pub(crate) const ABI_NET: i32 = 4;
/// First ABI with signal and abstract-unix-socket scoping.
pub(crate) const ABI_SCOPE: i32 = 6;

/// The ruleset of one thread and what it covers.
#[derive(Debug)]
pub(crate) struct LandlockPlan {
    /// The prepared ruleset.
    pub fd: Arc<OwnedFd>,
    /// The ABI the ruleset was built for.
    pub abi: i32,
    /// Whether signals and abstract unix sockets are scoped.
    pub scoped: bool,
    /// Whether TCP bind/connect is restricted.
    pub net: bool,
}

/// What to build.
pub(crate) struct LandlockRequest<'a> {
    pub abi: i32,
    pub read_write: &'a [PathBuf],
    /// (path, optional): optional paths are skipped silently when missing.
    pub read_only: &'a [(PathBuf, bool)],
    pub devices: &'a [&'a str],
    pub net: Option<&'a NetRules>,
    pub scope: bool,
}

fn path_rule(
    path: &Path,
    access: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<PathBeneath<PathFd>, String> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(abi)
    };
    Ok(PathBeneath::new(fd, access))
}

/// Builds the ruleset. Missing required paths are errors; missing optional
/// ones are skipped. Features the ABI lacks are left out and listed in
/// `missing`.
pub(crate) fn build(
    req: &LandlockRequest<'_>,
    missing: &mut Vec<String>,
) -> Result<LandlockPlan, LaunchError> {
    let abi = ABI::from(req.abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?;
    // An ABI without scoping is the launcher's to report or refuse, once
    // for every thread (`signal_scope`).
    let scoped = req.scope && req.abi >= ABI_SCOPE;
    if scoped {
        ruleset = ruleset.scope(Scope::from_all(abi))?;
    }
    let net = req.net.is_some() && req.abi >= ABI_NET;
    if req.net.is_some() && !net {
        missing.push(format!(
            "landlock TCP bind/connect rules: kernel ABI {} < {ABI_NET}",
            req.abi
        ));
    }
    if net {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let mut created = ruleset.create()?;
    for p in req.read_write {
        let rule = path_rule(p, AccessFs::from_all(abi), abi)
            .map_err(|e| LaunchError::Policy(format!("read-write directory unusable: {e}")))?;
        created = created.add_rule(rule)?;
    }
    for (p, optional) in req.read_only {
        match path_rule(p, AccessFs::from_read(abi), abi) {
            Ok(rule) => {
                created = created.add_rule(rule)?;
            }
            Err(_) if *optional => {}
            Err(e) => missing.push(format!("read-only path skipped: {e}")),
        }
    }
    let device_access = AccessFs::from_read(abi) | AccessFs::from_file(abi);
    for d in req.devices {
        if let Ok(rule) = path_rule(Path::new(d), device_access, abi) {
            created = created.add_rule(rule)?;
        }
    }
    if let (true, Some(n)) = (net, req.net) {
        for port in &n.bind {
            created = created.add_rule(NetPort::new(*port, AccessNet::BindTcp))?;
        }
        for port in &n.connect {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
    }
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or_else(|| LaunchError::Unavailable {
        what: "Landlock",
        why: "the kernel refused to create a ruleset".to_string(),
    })?;
    Ok(LandlockPlan {
        fd: Arc::new(fd),
        abi: req.abi,
        scoped,
        net,
    })
}
