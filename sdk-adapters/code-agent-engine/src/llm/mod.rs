//! OpenAI-compatible Chat Completions client (streaming) and the model types the agent loop speaks.
