//! Claude Code skill directories (`SKILL.md` with front matter) read from a workspace.
