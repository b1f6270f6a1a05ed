//! `code-agent serve --listen ADDR`: the engine as a standalone gRPC server.

fn main() {}
