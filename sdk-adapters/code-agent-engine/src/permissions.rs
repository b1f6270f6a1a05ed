//! Allow/deny/ask permission rules (`Bash(cargo:*)`, `Read(src/**/*.rs)`).
