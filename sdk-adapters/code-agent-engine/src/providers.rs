//! Model providers: persisted configuration, API keys from config or env.
